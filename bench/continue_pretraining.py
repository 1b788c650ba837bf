"""Continuing a complete pretraining (train.max_steps N -> 2N) side by side with a fresh 2N-step run,
on the same data in one Ray session: each one's wall time (driver included) and the steps it
trained. The peer is what the pipeline did before it could continue: start over.

    python bench/continue_pretraining.py [--steps N] [--config configs/tiny.yaml] [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path

import ray

from pipelines.config import load_config
from pipelines.stages.data import run_data
from pipelines.stages.pretrain import run_pretrain

REPO = Path(__file__).resolve().parents[1]


def training_seconds(run_dir: Path, start: int, batch: int) -> float:
    """Seconds spent in the steps after `start`, from the metrics lines' throughput (each line covers
    the steps since the line before it; the data skipped on a continuation counts in its first)."""
    lines = [json.loads(x) for x in (run_dir / "pretrain" / "metrics.jsonl").read_text().splitlines()]
    steps = sorted((r["step"], r["sequences_per_s"]) for r in lines if "sequences_per_s" in r and r["step"] > start)
    seconds, previous = 0.0, start
    for step, rate in steps:
        seconds += (step - previous) * batch / rate
        previous = step
    return seconds


def timed_pretrain(run_dir: Path, overrides: list[str], config_file: str) -> dict:
    """Wall seconds of run_pretrain, the steps it trained and their training seconds."""
    config = load_config(config_file, [f"run_dir={run_dir}", *overrides])
    started = time.perf_counter()
    run_pretrain(config)
    seconds = time.perf_counter() - started
    last = json.loads((run_dir / "pretrain" / "manifest.json").read_text())["segments"][-1]
    return {
        "wall": seconds,
        "steps": last["end_step"] - last["start_step"],
        "train": training_seconds(run_dir, last["start_step"], config.train.global_batch_size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="N: the first run's steps; both others end at 2N")
    parser.add_argument("--config", default=str(REPO / "configs" / "tiny.yaml"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ray.init(num_cpus=4, logging_level="WARNING")
    n = args.steps
    common = [
        f"train.checkpoint_every={n}",
        f"train.eval_every={2 * n}",
        f"train.log_every={max(1, n // 10)}",
        f"train.warmup_steps={max(1, n // 10)}",
        *args.overrides,
    ]
    root = Path(tempfile.mkdtemp(prefix="albert-continue-"))
    prepared = root / "prepared"
    run_data(load_config(args.config, [f"run_dir={prepared}", *common]))
    runs = {}
    for name in ("continued", "fresh"):
        runs[name] = root / name
        for stage in ("vocab", "data"):
            shutil.copytree(prepared / stage, runs[name] / stage)
    first = timed_pretrain(runs["continued"], [*common, f"train.max_steps={n}"], args.config)
    continued = timed_pretrain(runs["continued"], [*common, f"train.max_steps={2 * n}"], args.config)
    fresh = timed_pretrain(runs["fresh"], [*common, f"train.max_steps={2 * n}"], args.config)
    print(f"\nfirst run of {n} steps: {first['wall']:.1f} s wall, {first['train']:.1f} s training")
    print("| to 2N steps | steps trained | wall s | vs fresh | training s | vs fresh |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, r in (("continued from N", continued), ("fresh", fresh)):
        print(
            f"| {name} | {r['steps']} | {r['wall']:.1f} | {r['wall'] / fresh['wall']:.2f} | {r['train']:.1f} | "
            f"{r['train'] / fresh['train']:.2f} |"
        )
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
