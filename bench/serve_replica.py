"""The serve replica's own path on one device, without Ray: concurrent clients each send one row at a
time; ours answers them as `albert-ray serve`'s replica does (pipelines/stages/serve_batching.py's
Batcher gathers the rows of concurrent requests, up to --max-batch-size, and the Predictor runs each
batch in a thread: PredictEndpoint.run_rows), against transformers' `pipeline("text-classification")`
behind the same clients, one call per request in the same thread pool (a server that hands each
request to the pipeline), under ours' attention backends (albert_model/kernels.py inference_attention). Ours
is timed on a second pass over the rows (the first pays each width's first call). The same model,
rows, device and dtype on both sides; the replica's precision is serve's `--precision`. For the GPU
machine, which has no Ray (bench/gpu_suite.py's `serve` phase); bench/serve_load.py times the whole
server over HTTP on a Ray cluster.

Reported per side: rows per second over the whole run, each request's latency (p50, p99), and,
ours, the rows per forward pass. Agreement: the share of requests both answer with the same class.

    python bench/serve_replica.py --device cuda --dtype bf16 --clients 64 --requests 4000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, where it is not installed
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/'s modules, as a script sees them

from predict_throughput import (  # noqa: E402  (bench/ beside this file)
    default_spiece,
    make_model,
    result_lines,
    suite_configs,
    write_rows,
)

from albert_model import kernels  # noqa: E402
from pipelines.inference.predictor import Predictor  # noqa: E402
from pipelines.stages.serve_batching import Batcher  # noqa: E402
from pipelines.stages.serve_options import ServeOptions  # noqa: E402

SERVE_DEFAULTS = ServeOptions()
"""`albert-ray serve`'s batching unless told otherwise."""


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


async def drive(answer, texts: list[str], clients: int) -> tuple[list, list[float], float]:
    """`clients` callers, each taking the next text and awaiting `answer(text)` until none is left:
    the answers in the texts' order, each request's latency (s), and the wall time (s)."""
    answers: list = [None] * len(texts)
    latencies: list[float] = []
    next_index = iter(range(len(texts)))

    async def client() -> None:
        for i in next_index:
            started = time.perf_counter()
            answers[i] = await answer(texts[i])
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return answers, latencies, time.perf_counter() - started


def side(answers: list, latencies: list[float], seconds: float) -> dict:
    return {
        "rows_per_s": len(answers) / seconds,
        "seconds": seconds,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
    }


def replica_vs_pipeline(
    model: str,
    texts: list[str],
    seq: int,
    device: str,
    dtype: str,
    clients: int,
    options: ServeOptions = SERVE_DEFAULTS,
) -> dict:
    """Both sides over `texts` (one row per request) with `clients` concurrent callers; the replica
    batches as `options` say (serve's defaults: its batch bounds and wait)."""
    max_batch_size, batch_wait_ms = options.max_batch_size, options.batch_wait_ms
    import transformers

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    predictor = Predictor.load(
        model, seq, max_batch_size, device, max_batch_tokens=options.max_batch_tokens, precision=dtype
    )

    async def run_rows(rows: list[dict]) -> list[dict]:  # PredictEndpoint.run_rows
        outputs, _ = await asyncio.to_thread(predictor.run, rows)
        return outputs

    async def ours() -> tuple[list, list[float], float, Batcher]:
        batcher = Batcher(run_rows, max_batch_size, batch_wait_ms / 1000)

        async def answer(text: str) -> str:
            return (await batcher({"text": text}))["prediction"]

        await drive(answer, texts, clients)  # a first pass: each width's first call (kernels, plans)
        sync()
        batcher.batches = batcher.items = 0
        answers, latencies, seconds = await drive(answer, texts, clients)
        sync()
        return answers, latencies, seconds, batcher

    ours_answers, ours_latencies, ours_s, batcher = asyncio.run(ours())
    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
    pipe = transformers.pipeline(
        "text-classification", model=model, tokenizer=model, device=torch.device(device), dtype=torch_dtype
    )

    async def theirs() -> tuple[list, list[float], float]:
        async def answer(text: str) -> str:
            return (await asyncio.to_thread(pipe, text, truncation=True, max_length=seq))[0]["label"]

        await drive(answer, texts[: max_batch_size * 4], clients)
        sync()
        answers, latencies, seconds = await drive(answer, texts, clients)
        sync()
        return answers, latencies, seconds

    with kernels.inference_attention(torch.device(device)):  # ours' backends: no cuDNN plan per new width
        their_answers, their_latencies, their_s = asyncio.run(theirs())
    return {
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "dtype": dtype,
        "requests": len(texts),
        "clients": clients,
        "seq": seq,
        "max_batch_size": max_batch_size,
        "ours": side(ours_answers, ours_latencies, ours_s)
        | {"rows_per_batch": batcher.items / max(1, batcher.batches)},
        "transformers": side(their_answers, their_latencies, their_s),
        "speedup": their_s / ours_s,
        "agreement": statistics.mean(a == b for a, b in zip(ours_answers, their_answers)),
    }


def suite_phase(args, device: str) -> dict:
    """bench/gpu_suite.py's serve phase: replica_vs_pipeline on `device` over args.serve_requests
    synthetic rows, per `preset-seq:clients:dtype` of args.serve."""
    texts = write_rows(args.out / "serve-rows.csv", args.serve_requests, seed=1)
    return suite_configs(
        args,
        args.serve,
        "serve",
        lambda model, seq, clients, dtype: replica_vs_pipeline(model, texts, seq, device, dtype, clients),
    )


def suite_lines(results: dict) -> list[str]:
    """suite_phase's results, a line each, for bench/gpu_suite.py's table."""
    return result_lines(
        "serve",
        results,
        lambda r: (
            f"ours {r['ours']['rows_per_s']:.0f} rows/s (p99 {r['ours']['p99_ms']:.0f} ms, "
            f"{r['ours']['rows_per_batch']:.1f} rows a pass), pipeline {r['transformers']['rows_per_s']:.0f} rows/s "
            f"(p99 {r['transformers']['p99_ms']:.0f} ms), {r['speedup']:.2f}x, same class {r['agreement']:.4f}"
        ),
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument(
        "--spiece", help="the export's SentencePiece model (default: one trained on the embedded corpus)"
    )
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        spiece = args.spiece or default_spiece(root)
        model = make_model(root / "model", args.preset, spiece)
        texts = write_rows(root / "rows.csv", args.requests, seed=1)
        result = replica_vs_pipeline(model, texts, args.seq, args.device, args.dtype, args.clients)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
