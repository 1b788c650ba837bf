"""The relay that drops Ray's known-false core worker line from a process's stderr (issue #45: a log
with only what matters) keeps every other line, the last words of a process that dies, and what the
process writes after Ctrl-C."""

import os
import signal
import subprocess
import sys
import time

# the line as Ray 2.60's driver writes it, and as the driver prints a worker's (the TrainController's)
DRIVER_LINE = (
    "[2026-11-27 01:56:49,955 E 12799 12799] core_worker.cc:2465: Actor with class name: "
    "'MapWorker(MapBatches(A))' and ID: 'f7d0d2dbb366d7fab5419c2a01000000' has constructor arguments in "
    "the object store and max_restarts > 0. If the arguments in the object store go out of scope or are lost, "
    "the actor restart will fail. See https://github.com/ray-project/ray/issues/53727 for more details."
)
WORKER_LINE = (
    "\x1b[36m(TrainController pid=29259)\x1b[0m [2026-11-27 02:11:04,226 E 29259 29432] core_worker.cc:2465: "
    "Actor with class name: 'PreemptionWatcher' and ID: '3cf1' has constructor arguments in the object store "
    "and max_restarts > 0. If the arguments in the object store go out of scope or are lost, the actor restart "
    "will fail."
)
# another error of the same file, which must stay
OTHER_ERROR = "[2026-11-27 01:56:50,000 E 12799 12799] core_worker.cc:1000: Failed to connect to the raylet."


def program(body: str) -> str:
    return (
        "import os, sys, time\n"
        "from pipelines.native_stderr import drop_native_lines\n"
        "print('before', file=sys.stderr, flush=True)\n"
        "drop_native_lines()\n"
        f"lines = {[DRIVER_LINE, OTHER_ERROR, WORKER_LINE]!r}\n" + body
    )


def run(body: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", program(body)], capture_output=True, text=True, timeout=60, check=False, **kwargs
    )


def test_the_false_line_goes_and_every_other_line_stays_in_order():
    # written by the native side (os.write on descriptor 2, as the C++ logger does) and through sys.stderr
    done = run(
        "for line in lines:\n"
        "    os.write(2, (line + '\\n').encode())\n"
        "print('a python line', file=sys.stderr)\n"
        "os.write(2, b'last words without a newline')\n"
    )
    assert done.returncode == 0
    assert done.stderr.splitlines() == ["before", OTHER_ERROR, "a python line", "last words without a newline"]
    assert "max_restarts" not in done.stderr


def test_a_process_killed_by_a_signal_still_has_its_last_lines_relayed():
    done = run(
        "os.write(2, b'the cause of the crash\\n')\nos.write(2, (lines[0] + '\\n').encode())\nos.kill(os.getpid(), 9)\n"
    )
    assert done.returncode == -signal.SIGKILL
    assert done.stderr.splitlines() == ["before", "the cause of the crash"]


def test_ctrl_c_reaches_the_process_and_its_traceback_still_comes_out(tmp_path):
    # Ctrl-C signals the whole foreground process group, the relay included; it must outlive the process
    flag = tmp_path / "ready"
    process = subprocess.Popen(
        [sys.executable, "-c", program(f"open({str(flag)!r}, 'w').close()\ntime.sleep(60)\n")],
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == -signal.SIGINT  # Python's exit on an uncaught KeyboardInterrupt
    assert stderr.splitlines()[0] == "before" and stderr.rstrip().endswith("KeyboardInterrupt"), stderr


# Serve's lines as the driver printed them in an `albert-ray serve` run (Ray 2.60, a terminal's colours)
SERVE_DROPPED = [
    "\x1b[36m(ServeController pid=18497)\x1b[0m INFO 2026-11-27 18:56:06,476 controller 18497 -- HAProxy is enabled in "
    "ServeController, replacing Serve proxy with HAProxy.",
    "\x1b[36m(ServeController pid=18497)\x1b[0m WARNING 2026-11-27 18:56:06,476 controller 18497 -- "
    "HTTPOptions.host='127.0.0.1' won't accept connections from HAProxy on other nodes; cross-node routing will fail "
    "with connection refused.",
    "\x1b[36m(HAProxyManager pid=18541)\x1b[0m INFO 2026-11-27 18:56:12,365 proxy 192.0.2.2 -- HAProxy started "
    "successfully.",
    "(ProxyActor pid=18538, ip=10.0.0.5) INFO 2026-11-27 18:56:11,902 proxy 10.0.0.5 -- Got updated endpoints: {}.",
    "\x1b[36m(ServeReplica:albert-ray:PredictEndpoint pid=20280)\x1b[0m INFO 2026-11-27 18:58:51,754 "
    "albert-ray_PredictEndpoint ycqvotdq b801-50e7 -- POST /predict 200 41.6ms",
]
SERVE_KEPT = [
    # a replica's warning, a Serve warning of another kind, a non-Serve actor's INFO line in the same format
    "\x1b[36m(ServeReplica:albert-ray:PredictEndpoint pid=20280)\x1b[0m WARNING 2026-11-27 18:58:50,506 "
    "albert-ray_PredictEndpoint ycqvotdq -- Failed to start RequestProtocol.HTTP server on port 30000",
    "\x1b[36m(ServeController pid=17586)\x1b[0m WARNING 2026-11-27 18:54:11,477 controller 17586 -- Deployment "
    "'PredictEndpoint' in application 'albert-ray' has 1 replicas that have taken more than 30s to be scheduled.",
    "\x1b[36m(TrainController pid=29259)\x1b[0m INFO 2026-11-27 02:11:04,226 controller 29259 -- a line of Train's",
    # a line of the replica's own code (Ray's worker format) and one that only mentions INFO
    "\x1b[36m(ServeReplica:albert-ray:PredictEndpoint pid=20280)\x1b[0m 2026-11-27 18:58:50,506\tINFO serve.py:10 -- "
    "ours",
    'INFO 2026-11-27 19:36:40,315 serve 11008 -- Started Serve in namespace "serve".',
]


def test_serves_info_lines_and_its_false_host_warning_go_and_its_other_lines_stay():
    done = run(f"for line in {SERVE_DROPPED + SERVE_KEPT!r}:\n    os.write(2, (line + '\\n').encode())\n")
    assert done.returncode == 0
    assert done.stderr.splitlines() == ["before", *SERVE_KEPT]
