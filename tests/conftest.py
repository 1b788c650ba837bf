"""Suite-wide fixtures: one Ray session, one local S3 API server, one MLflow tracking server, a tiny
pretrained ALBERT; markers that follow the fixtures (a test that uses Ray is marked `ray`); GPU tests
skip without CUDA."""

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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

# The session's own folders below, removed when it ends (or each session leaves two in /tmp).
SESSION_DIR = tempfile.mkdtemp(prefix="albert-tests-")
atexit.register(shutil.rmtree, SESSION_DIR, True)

# Commands without RAY_ADDRESS join this checkout's local head when it is up (make run leaves one):
# the suite's never do, whatever runs on the machine (the test of joining names a head of its own).
os.environ["ALBERT_RAY_LOCAL_DIR"] = os.path.join(SESSION_DIR, "no-local-head")
os.makedirs(os.environ["ALBERT_RAY_LOCAL_DIR"])

# hypothesis keeps what it learns in .hypothesis/ of the working directory: not in the checkout
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", os.path.join(SESSION_DIR, "hypothesis"))

RAY_FIXTURES = {"ray_session", "head"}  # a Ray session in this process, or a Ray head of its own


def pytest_addoption(parser):
    parser.addoption(
        "--cluster", action="store_true", help="also collect the local autoscaling cluster's tests (make test-cluster)"
    )
    parser.addoption(
        "--learning", action="store_true", help="also collect the recipes' learning tests (make test-learning)"
    )
    parser.addoption(
        "--bench", action="store_true", help="also collect the benchmark scripts' smoke runs (make test-bench)"
    )
    parser.addoption(
        "--e2e", action="store_true", help="also collect the job and kill-and-resume tests (make test-e2e)"
    )
    parser.addoption(
        "--learning-train-seed",
        type=int,
        default=None,
        help="the learning tests' pretraining data order (train.seed; default: the recipe's), to show their "
        "claims hold across orders: make test-learning PYTEST_ARGS=--learning-train-seed=7",
    )


# `make test` runs two pytest-xdist workers (--dist loadgroup): one runs every test of the "serial"
# group in order (the Ray tests, sharing the session's Ray, and whatever starts Ray, a cluster or the
# command line in a subprocess), the other the modules below, which start no Ray (pure model,
# training-loop, fine-tuning and export tests), a module at a time so its fixtures are built once.
# A module not listed here runs in the serial group.
PARALLEL_SAFE = (
    "tests/albert_model/",
    "tests/bench/",
    "tests/cluster/",
    "tests/pipelines/export/",
    "tests/pipelines/finetuning/",
    "tests/pipelines/inference/",
    "tests/pipelines/prep/",
    "tests/pipelines/report/",
    "tests/pipelines/train/",
    "tests/pipelines/test_config",
    "tests/pipelines/test_stages.py",
    "tests/pipelines/test_storage.py",
    "tests/pipelines/test_suite_config.py",
    "tests/test_family_names.py",
    "tests/test_structure.py",
)


def parallel_group(item) -> str:
    """The xdist group of a test: its module where it may run beside the Ray tests, else "serial"
    (and so are the tests of the MLflow server, which the serial worker alone starts)."""
    path = item.nodeid.split("::")[0]
    uses_mlflow = "mlflow_server" in getattr(item, "fixturenames", ())
    if item.get_closest_marker("ray") or uses_mlflow or not path.startswith(PARALLEL_SAFE):
        return "serial"
    return path


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs CUDA (gpu marker); skipped, not passed")
    # make test: the cluster tests are make test-cluster's, the learning tests make test-learning's, the
    # end-to-end ones make test-e2e's and the benches' smoke runs (tests/bench/) make test-bench's,
    # deselected here (reported as deselected, never as skipped or passed)
    for item in items:
        if item.nodeid.startswith("tests/bench/"):
            item.add_marker(pytest.mark.bench)
    for marker in ("cluster", "learning", "e2e", "bench"):
        if not config.getoption(f"--{marker}"):
            deselected = [item for item in items if item.get_closest_marker(marker)]
            items[:] = [item for item in items if not item.get_closest_marker(marker)]
            config.hook.pytest_deselected(items=deselected)
    for item in items:
        if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.ray)
        item.add_marker(pytest.mark.xdist_group(parallel_group(item)))
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip)
    MLFLOW.needed = any("mlflow_server" in getattr(item, "fixturenames", ()) for item in items)
    if MLFLOW.needed and not os.environ.get("PYTEST_XDIST_WORKER"):
        MLFLOW.start()  # its start (~10 s on 2 cores) overlaps the tests before the first that needs it


def pytest_runtest_setup(item):
    """Under xdist each worker collects every test: the server starts with the first serial test."""
    if MLFLOW.needed and MLFLOW.process is None and parallel_group(item) == "serial":
        MLFLOW.start()


def pytest_sessionfinish(session, exitstatus):
    MLFLOW.stop()


class MlflowServer:
    """A real `mlflow server` (sqlite backend, artifacts served from a local folder) on 127.0.0.1,
    started once when a selected test needs it, stopped at the end of the session."""

    def __init__(self):
        self.process, self.url, self.root = None, None, None
        self.needed = False

    def start(self) -> None:
        self.root = root = Path(tempfile.mkdtemp(prefix="mlflow-server-"))
        port = free_port()
        # the job runner (huey, not installed: requirements-dev-nodeps.txt) stays off; one worker process
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--backend-store-uri",
                f"sqlite:///{root}/mlflow.db",
                "--artifacts-destination",
                str(root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its uvicorn worker stops with it (the group is signalled)
        )
        self.url = f"http://127.0.0.1:{port}"

    def wait(self) -> str:
        deadline = time.monotonic() + 300  # its start takes ~10 s on 2 idle cores, minutes on overloaded ones
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}")
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=1)
                return self.url
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("mlflow server did not start in 300 s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=30)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        self.process = self.root = None


MLFLOW = MlflowServer()


@pytest.fixture(scope="session")
def mlflow_server():
    """The URL of the session's MLflow tracking server."""
    return MLFLOW.wait()


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
    deadline = time.monotonic() + 120  # ~1 s on 2 idle cores; 10 s ran out on a loaded machine
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"moto_server did not start (exit status {server.poll()})") from None
            time.sleep(0.1)
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
    import psutil
    import ray

    for attempt in range(3):
        ours = {p.pid for p in psutil.Process().children(recursive=True)}
        try:
            ray.init(num_cpus=4, include_dashboard=False, logging_level="WARNING")
            break
        except Exception as e:
            # Ray waits a fixed 30 s for its raylet (ray/_private/node.py), which runs out on a loaded
            # machine; the failed start's processes (GCS, raylet), which ray.shutdown does not know
            # of, are stopped before the next try
            for process in psutil.Process().children(recursive=True):
                if process.pid not in ours:
                    process.kill()
            ray.shutdown()
            if "timed out during startup" not in str(e) or attempt == 2:
                raise
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
