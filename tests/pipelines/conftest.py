"""Fixtures of the stage-level tests: the toy sixth stage registered for a test, and a place for
run_dirs, locally or on s3:// (moto)."""

import os
import time

import pytest

from pipelines.stages import STAGES
from pipelines.storage import filesystem

from .toy_stage import TOY


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(STAGES, "toy", TOY)


@pytest.fixture(params=["local", "s3"])
def run_root(request, tmp_path):
    """A place for run_dirs: a local folder, or a fresh bucket on the session's moto server."""
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_endpoint")
    bucket = f"lifecycle-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    filesystem(f"s3://{bucket}/x")[0].mkdir(bucket)
    return f"s3://{bucket}/runs"
