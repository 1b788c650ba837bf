"""`albert-ray local`: this checkout's own local Ray head, and jobs submitted to it.

`make run` uses it: a head with token auth on, the dashboard on 127.0.0.1, every port free-picked
(another Ray on the machine may hold the defaults) and its own temp dir (so a plain `ray.init()`
elsewhere does not find it). Its state (pid, ports, token) lives in `.ray-local/` (gitignored);
`stop` ends this head's process group only, never another Ray on the machine.

    albert-ray local run [--num-cpus N] [full_run args ...]   # start if needed, submit, stream (make run)
    albert-ray local start | status | stop
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from pipelines.cli.run import preflight
from pipelines.config import load_config
from pipelines.console import report_user_error
from pipelines.errors import LeaseHeld, UserError
from pipelines.rundir.lease import read_holder
from pipelines.rundir.registry import STAGES, config_value
from pipelines.stages.local_head import (
    REPO,
    LocalHead,
    head_temp_dir,
    load_head,
    local_dir,
    private_temp_dir,
    state_file,
    write_private,
)

RAY = str(Path(sys.executable).parent / "ray")
PORT_NAMES = (
    "port",
    "dashboard-port",
    "ray-client-server-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "metrics-export-port",
    "node-manager-port",
    "object-manager-port",
    "runtime-env-agent-port",
)
WORKER_PORTS = 200


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_ports() -> dict[str, int]:
    """A free port per Ray service and a free range for workers."""
    ports: dict[str, int] = {}
    for name in PORT_NAMES:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[name] = s.getsockname()[1]
    while True:
        base = random.randrange(20000, 30000 - WORKER_PORTS)
        span = range(base, base + WORKER_PORTS)
        if not set(span) & set(ports.values()) and all(_bindable(p) for p in span):
            return {**ports, "min-worker-port": base, "max-worker-port": base + WORKER_PORTS - 1}


def start_head(
    state_dir: Path | None = None,
    num_cpus: int | None = None,
    timeout_s: float = 180,
    extra_args: tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
    ports: dict[str, int] | None = None,
) -> LocalHead:
    """Start a head for this state dir and wait until it takes jobs. `extra_args` go to `ray start`
    (e.g. an autoscaling config), `extra_env` to every process of the cluster; `ports` as
    `pick_ports` gives them (picked here when None)."""
    state_dir = state_dir or local_dir()
    state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ports = ports or pick_ports()
    temp_dir = head_temp_dir(state_dir)
    private_temp_dir(temp_dir)
    token = secrets.token_hex(32)
    head_address = f"127.0.0.1:{ports['port']}"
    command = [
        RAY,
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        f"--temp-dir={temp_dir}",
        "--disable-usage-stats",
        *[f"--{name}={port}" for name, port in ports.items()],
        *([f"--num-cpus={num_cpus}"] if num_cpus is not None else []),
        *extra_args,
    ]
    # Jobs run `python ...` with the head's PATH: make that the interpreter (venv) running this.
    # RAY_ADDRESS: Ray's own actors (Ray Train's placement group cleaner) look the cluster up
    # without an address and fail when another Ray runs on the machine.
    env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_ADDRESS": head_address,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        **(extra_env or {}),
    }
    log_path = state_dir / "head.log"
    deadline = time.time() + timeout_s
    while True:
        started_at = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        head = LocalHead(process.pid, ports, temp_dir, token)
        write_private(state_dir / "token", token)
        write_private(state_file(state_dir), json.dumps(asdict(head), indent=2))
        # Up means: the dashboard answers, the job agent listens (jobs submitted before it fail), and
        # `ray start` got past its raylet's registration, which it waits a fixed 30 s for (it exits
        # after, taking the head down, though the dashboard answered already).
        while not (head.responds() and head.agent_listening() and STARTED in _since(log_path, started_at)):
            if process.poll() is not None:
                output = _since(log_path, started_at)
                if RAYLET_TIMEOUT in output and time.time() < deadline:
                    head.stop(timeout_s=10)  # what it left of its processes, its own group only
                    print(
                        "ray start: the head's raylet did not register within Ray's fixed 30 s (a loaded machine); "
                        "starting it again",
                        file=sys.stderr,
                        flush=True,
                    )
                    break
                raise RuntimeError(f"ray start exited with {process.returncode}; see {log_path}:\n" + output[-3000:])
            if time.time() > deadline:
                head.stop()
                raise TimeoutError(f"the Ray head did not come up in {timeout_s:.0f} s; see {log_path}")
            time.sleep(1)
        else:
            return head


STARTED = "Ray runtime started."
"""`ray start`'s line once its node is up (ray/scripts/scripts.py)."""
RAYLET_TIMEOUT = "timed out during startup"
"""Ray's error when a node's raylet does not register within its fixed 30 s (ray/_private/node.py)."""


def _since(log_path: Path, offset: int) -> str:
    """The head log's text from `offset` (this start's)."""
    with open(log_path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


UPLOAD_NOTE = "Ignoring upload to cluster for these files"
"""Ray's packaging logs this line at INFO for every ignore file it reads (.gitignore, .rayignore, and
each tool's own in .ruff_cache/ and the like), three times an upload: what is left out of the upload
is ours to set (.gitignore, .rayignore), so the job's log does not repeat it."""


def _upload_env(head: LocalHead) -> dict[str, str]:
    """The `ray job submit` client's environment. Ray's default excludes (.git, .venv, venv,
    __pycache__) are emptied: .rayignore and .gitignore leave those out already, and with the default
    list Ray warns once per folder that it is "now ignored by default" in every job's log."""
    return {**head.client_env(), "RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES": ""}


def submit(
    head: LocalHead,
    entrypoint: list[str],
    working_dir: Path = REPO,
    attempts: int = 5,
    echo: bool = True,
    env: dict[str, str] | None = None,
) -> tuple[int, str]:
    """`ray job submit --working-dir DIR -- ENTRYPOINT`, streaming the job's log (to stdout when
    `echo`); the CLI's exit code (1 when the job failed) and its output. `env`: environment
    variables of the job (its runtime environment). Retries while the head's job agent is not ready yet."""
    command = [
        RAY,
        "job",
        "submit",
        f"--address={head.dashboard_url}",
        f"--working-dir={working_dir}",
        *([f"--runtime-env-json={json.dumps({'env_vars': env})}"] if env else []),
        "--",
        *entrypoint,
    ]
    for attempt in range(attempts):
        process = subprocess.Popen(
            command, env=_upload_env(head), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            if UPLOAD_NOTE in line:
                continue
            lines.append(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        rc = process.wait()
        if rc == 0 or not any("No available agent" in line for line in lines) or attempt == attempts - 1:
            break
        time.sleep(3)
    return rc, "".join(lines)


def absolute_paths(argv: list[str]) -> tuple[list[str], str]:
    """full_run's arguments with its relative local paths made absolute against the checkout: the
    run_dir and every path a stage reads or publishes to (finetune.pretrained=runs/default/pretrain/hf
    in configs/qa-demo.yaml). The job runs in a copy of the working directory without runs/ (it is
    .rayignore'd), where they would name nothing. Returns the arguments and the run_dir."""
    args = argparse.ArgumentParser(add_help=False)
    args.add_argument("--config", action="append")  # several: each over the ones before (load_config)
    known, rest = args.parse_known_args(argv)
    overrides = [a for a in rest if "=" in a and not a.startswith("-")]
    config = load_config(known.config, overrides)

    def absolute(path: str) -> str:
        return path if "://" in path else str((REPO / os.path.expanduser(path)).resolve())

    keys = ["run_dir", *dict.fromkeys(k for s in STAGES.values() for k in (*s.input_paths, s.publish) if k)]
    added = []
    for key in keys:
        value = config_value(config, key)
        if isinstance(value, str) and absolute(value) != value:
            added.append(f"{key}={absolute(value)}")
        elif isinstance(value, list) and [absolute(v) for v in value] != value:
            added.append(f"{key}={json.dumps([absolute(v) for v in value])}")
    return [*argv, *added], absolute(config.run_dir)


def check_before_submitting(full_run_args: list[str], run_dir: str) -> None:
    """full_run's own checks (config, stages, run_dir, input paths), and no other run on the run_dir."""
    preflight(full_run_args)
    holder = read_holder(run_dir)
    if holder is not None and not holder[0].stale():
        raise LeaseHeld(f"run_dir {run_dir} is in use by {holder[0].describe()}: wait for it to end or stop it")


RUN_OUTPUTS = (
    ("report:", "report/report.md", ""),
    ("pretrained model:", "pretrain/hf", " (transformers format)"),
    ("fine-tuned model:", "finetune/best", " (transformers format)"),
)


def outputs_summary(run_dir: str) -> str:
    """A line for each of the run's main outputs that exists (a failed job may have made none)."""
    from ..storage import exists

    lines = [f"{name:<19}{run_dir}/{path}{note}\n" for name, path, note in RUN_OUTPUTS if exists(f"{run_dir}/{path}")]
    return "".join(lines) or f"outputs:           none yet in {run_dir}\n"


def main(argv: list[str] | None = None, prog: str = "local_cluster") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["run", "start", "status", "stop"])
    # At least 4: a training worker or a Tune trial holds a CPU while Ray Data's read tasks need
    # one more, which a 2-core machine would not have left.
    parser.add_argument(
        "--num-cpus",
        type=int,
        default=max(4, os.cpu_count() or 1),
        help="logical CPUs of a head this command starts (default: the machine's, at least 4)",
    )
    args, rest = parser.parse_known_args(argv)
    head = load_head()
    if args.command == "stop":
        if head is not None:
            head.stop()
        print("local Ray head stopped" if head else "no local Ray head of this checkout is running")
        return 0
    if args.command == "status":
        print(f"running: dashboard {head.dashboard_url}, pid {head.pid}" if head else "not running")
        return 0 if head else 1
    if args.command == "run":
        try:  # a bad config, a refused run_dir or a held lease stops here, before a head starts
            full_run_args, run_dir = absolute_paths(rest)
            check_before_submitting(full_run_args, run_dir)
        except UserError as e:
            return report_user_error(prog, e)
    if head is None:
        print("starting this checkout's local Ray head ...", flush=True)
        try:
            head = start_head(num_cpus=args.num_cpus)
        except UserError as e:  # its Ray folder not this user's
            return report_user_error(prog, e)
    print(f"Ray dashboard: {head.dashboard_url} (token in {local_dir() / 'token'})", flush=True)
    if args.command == "start":
        return 0
    started = time.time()
    rc, _ = submit(head, ["python", "pipelines/full_run.py", *full_run_args])
    print(
        f"\n{'job SUCCEEDED' if rc == 0 else 'job FAILED'} after {(time.time() - started) / 60:.1f} min\n"
        + outputs_summary(run_dir)
        + f"Ray dashboard:     {head.dashboard_url} (token in {local_dir() / 'token'}); the head keeps running, "
        f"stop it with `{Path(sys.executable).parent / 'albert-ray'} local stop` (or `make stop`)",
        flush=True,
    )
    return rc
