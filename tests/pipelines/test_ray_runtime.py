"""A stage command's own local Ray (pipelines/stages/ray_runtime.py init_ray, no RAY_ADDRESS): token
authentication with a token kept in the process's environment, never a world-readable
~/.ray/auth_token written for it."""

import os
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
"""


@pytest.mark.slow
def test_a_local_ray_gets_a_private_token_not_a_world_readable_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    env["HOME"] = str(tmp_path)  # Ray writes its default token under ~/.ray
    done = subprocess.run(
        [sys.executable, "-c", STARTS_RAY], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.strip().splitlines()[-1]) == 8  # its workers hold the token, from the environment
    assert "Token authentication is enabled" in done.stderr  # Ray's own line: auth is on
    assert not (tmp_path / ".ray" / "auth_token").exists()
