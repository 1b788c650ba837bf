"""Suite-wide fixtures: one Ray session, one local S3 API server, a tiny pretrained ALBERT; markers
that follow the fixtures (a test that uses Ray is marked `ray`); GPU tests skip without CUDA."""

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import save_hf_pretrained
from pipelines.finetuning.tables import bbc_news_examples
from pipelines.prep.text import normalize_text

VOCAB_SIZE = 1000


# Ray Train's controller polls its workers every 2 s by default; each report waits for it, and a
# tiny test run reports every step. Polled every 0.25 s, a 4-step pretraining takes ~25 s, not ~37.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.25")

RAY_FIXTURES = {"ray_session", "head"}  # a Ray session in this process, or a Ray head of its own


def pytest_addoption(parser):
    parser.addoption(
        "--cluster", action="store_true", help="also collect the local autoscaling cluster's tests (make test-cluster)"
    )
    parser.addoption(
        "--learning", action="store_true", help="also collect the recipes' learning tests (make test-learning)"
    )


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs CUDA (gpu marker); skipped, not passed")
    # make test: the cluster tests are make test-cluster's and the learning tests make test-learning's,
    # deselected here (reported as deselected, never as skipped or passed)
    for marker in ("cluster", "learning"):
        if not config.getoption(f"--{marker}"):
            deselected = [item for item in items if item.get_closest_marker(marker)]
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
            config.hook.pytest_deselected(items=deselected)
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ray)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 API (moto_server) on 127.0.0.1, started by the test session and stopped after it."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        server.kill()
        raise RuntimeError("moto_server did not start")
    env = {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield url
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="session")
def ray_session(s3_endpoint):
    """One local Ray instance for every `ray` test (they run serially in this process). It starts
    after the S3 server so its workers inherit the endpoint settings. 4 logical CPUs on a 2-core
    machine: training workers and Tune trials each hold one, and Ray Data's read tasks need one
    left over or they wait forever."""
    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory):
    """config.json + model.safetensors of a random tiny AlbertForPreTraining, and a 1000-piece
    SentencePiece model trained on BBC News lines."""
    from pipelines.stages.vocab import train_sentencepiece  # imports Ray: not at collection (the GPU machine has none)

    root = tmp_path_factory.mktemp("pretrained")
    lines = [line for text in bbc_news_examples().texts[::5] for line in text.splitlines() if line.strip()]
    (root / "spiece.model").write_bytes(train_sentencepiece([normalize_text(s) for s in lines], VOCAB_SIZE, []))
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE))
    return str(save_hf_pretrained(model, root / "hf", spiece_model=root / "spiece.model"))
