"""`albert-ray serve` under load (issue #46): the command run in this process on the session's Ray, a
tiny random classifier behind it, real HTTP. With its queue bound at N, a burst of 10N requests is
answered only 200s (each the model's answer) and 503s with Retry-After, never a 500, and the
replica serves on; a request in flight when the command gets SIGTERM is answered before Serve
stops; under load the autoscaler adds a second replica and, once the load stops, goes back to one,
read from Serve's own status. Each starts Serve (tens of seconds): e2e."""

import http.client
import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from pipelines.inference.predictor import Predictor
from pipelines.stages.serve import APP, RETRY_AFTER_S
from tests.conftest import free_port

pytestmark = pytest.mark.e2e

DEADLINE_S = 180.0
"""The longest a test waits for Serve to reach a state (a replica started or stopped)."""


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request on a connection of its own."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(method, path, data, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read()
    finally:
        conn.close()


def text(i: int) -> str:
    return f"Shares of company {i} rose after the bank reported strong profits in quarter {i % 4 + 1}."


def until(condition, what: str) -> None:
    """Polls `condition` until it holds; fails naming `what` after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {DEADLINE_S:.0f} s"
        time.sleep(0.1)


def serving_with(monkeypatch, checks) -> None:
    """Makes the command run `checks()` where it waits for Ctrl-C; Ctrl-C after them unless they stop it."""
    from pipelines.cli import serve as command

    def serving(seconds: float) -> None:
        checks()
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "time", SimpleNamespace(sleep=serving))


def running_replicas() -> int:
    from ray import serve

    app = serve.status().applications.get(APP)
    return app.deployments["PredictEndpoint"].replica_states.get("RUNNING", 0) if app else 0


def test_a_burst_beyond_the_queue_is_200s_and_503s_and_sigterm_drains_the_request_in_flight(
    ray_session, classifier, monkeypatch, capsys
):
    from ray import serve

    from pipelines.cli.command import main

    port, queue = free_port(), 3
    burst = 10 * queue
    expected = Predictor.load(classifier, 32, device="cpu").predict([{"text": text(i)} for i in range(burst + 1)])
    drained: dict = {}

    def post_alone() -> None:
        drained["answer"] = request(port, "POST", "/predict", {"text": text(burst)})

    in_flight = threading.Thread(target=post_alone)

    def checks() -> None:
        status, _, body = request(port, "GET", "/predict/health")
        assert (status, json.loads(body)) == (200, {"status": "ok", "ongoing": 0})
        with ThreadPoolExecutor(burst) as pool:
            answers = list(pool.map(lambda i: request(port, "POST", "/predict", {"text": text(i)}), range(burst)))
        statuses = [status for status, _, _ in answers]
        assert set(statuses) <= {200, 503} and statuses.count(503) > 0 and statuses.count(200) >= queue, statuses
        for i, (status, headers, body) in enumerate(answers):
            if status == 503:
                assert headers.get("retry-after") == str(RETRY_AFTER_S), headers
                continue
            answer = json.loads(body)
            assert answer["prediction"] == expected[i]["prediction"]
            # the burst's batches pad each row otherwise than the reference's one batch: float noise of ~1e-6
            assert answer["probabilities"] == pytest.approx(expected[i]["probabilities"], abs=1e-5)
        assert serve.status().applications[APP].deployments["PredictEndpoint"].status == "HEALTHY"

        # one request alone waits out the batch wait at the replica; SIGTERM comes while it does
        in_flight.start()
        until(lambda: json.loads(request(port, "GET", "/predict/health")[2])["ongoing"] == 1, "request in flight")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(DEADLINE_S)  # the command's handler interrupts it with KeyboardInterrupt
        pytest.fail("SIGTERM did not stop the command")

    serving_with(monkeypatch, checks)
    argv = ["--port", str(port), "--max-seq-length", "32", "--max-batch-size", "2", "--batch-wait-ms", "3000"]
    try:
        capsys.readouterr()
        assert main(["serve", classifier, *argv, "--max-queued-requests", str(queue)]) == 0
        out = capsys.readouterr().out  # Ray's workers' lines come between the command's
        assert "stopping: the replicas finish the requests they hold\n" in out and out.endswith("stopped\n")
        in_flight.join(DEADLINE_S)
        status, _, body = drained["answer"]
        assert status == 200 and json.loads(body)["prediction"] == expected[burst]["prediction"]
        assert serve.status().applications == {}
    finally:
        serve.shutdown()


def test_under_load_serve_scales_to_two_replicas_and_back_to_one_when_it_stops(ray_session, classifier, monkeypatch):
    from ray import serve

    from pipelines.cli.command import main

    port = free_port()
    load = threading.Event()
    seen: list[int] = []

    def client(i: int) -> None:
        while load.is_set():
            status, _, _ = request(port, "POST", "/predict", {"text": text(i)})
            seen.append(status)

    def checks() -> None:
        assert running_replicas() == 1
        load.set()
        with ThreadPoolExecutor(8) as pool:
            for i in range(8):
                pool.submit(client, i)
            try:
                until(lambda: running_replicas() == 2, "second replica under load")
            finally:
                load.clear()
        until(lambda: running_replicas() == 1, "scale-down to one replica after the load")
        assert set(seen) == {200}

    serving_with(monkeypatch, checks)
    argv = ["--port", str(port), "--max-seq-length", "32", "--max-batch-size", "2", "--batch-wait-ms", "50"]
    scaling = ["--min-replicas", "1", "--max-replicas", "2", "--target-ongoing-requests", "1"]
    delays = ["--upscale-delay-s", "0", "--downscale-delay-s", "1", "--cpus-per-replica", "0.5"]
    try:
        assert main(["serve", classifier, *argv, *scaling, *delays]) == 0
    finally:
        serve.shutdown()
