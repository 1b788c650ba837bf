"""How `albert-ray serve` starts Serve (pipelines/stages/serve.py start_endpoint): Serve's controller
gets a proxy start-up limit of PROXY_READY_S. At Ray's 5 s the controller stopped a proxy still
starting on a busy 2-vCPU machine and serve.start failed on it ("ProxyActor ... killed by
ray.kill ... never ran", seen in the command's e2e test); the limit is read where the controller
imports Serve, so only the controller's own environment (serve.start's controller_options) sets it."""

from __future__ import annotations

from types import SimpleNamespace

from pipelines.stages import serve as stage
from pipelines.stages.serve_options import ServeOptions


def test_serve_starts_with_the_proxy_given_a_minute_to_come_up(monkeypatch):
    started = {}
    fake = SimpleNamespace(
        status=lambda: SimpleNamespace(proxies={}, applications={}),
        start=lambda **kwargs: started.update(kwargs),
        run=lambda app, **kwargs: started.setdefault("run", kwargs),
    )
    monkeypatch.setattr(stage, "serve", fake)
    monkeypatch.setattr(stage, "replica_gpus", lambda options: 0.0)
    monkeypatch.setattr(stage, "check_port", lambda options: None)
    url = stage.start_endpoint(lambda gpus: "app", ServeOptions(port=8123))
    env = started["controller_options"]["runtime_env"]["env_vars"]
    assert env == {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(stage.PROXY_READY_S)} and stage.PROXY_READY_S >= 60
    assert started["run"]["route_prefix"] == "/predict" and url == "http://127.0.0.1:8123/predict"
