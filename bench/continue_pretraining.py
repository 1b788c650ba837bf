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
from pipelines.data import run_data
from pipelines.pretrain import run_pretrain

REPO = Path(__file__).resolve().parents[1]


def timed_pretrain(run_dir: Path, overrides: list[str], config_file: str) -> tuple[float, list[dict]]:
    """Seconds of run_pretrain and the manifest's segments."""
    config = load_config(config_file, [f"run_dir={run_dir}", *overrides])
    started = time.perf_counter()
    run_pretrain(config)
    seconds = time.perf_counter() - started
    return seconds, json.loads((run_dir / "pretrain" / "manifest.json").read_text())["segments"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000, help="N: the first run's steps; both others end at 2N")
    parser.add_argument("--config", default=str(REPO / "configs" / "tiny.yaml"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ray.init(num_cpus=4, logging_level="WARNING")
    n = args.steps
    common = [f"train.checkpoint_every={n}", f"train.eval_every={2 * n}", f"train.log_every={max(1, n // 10)}",
              f"train.warmup_steps={max(1, n // 10)}", *args.overrides]
    root = Path(tempfile.mkdtemp(prefix="albert-continue-"))
    prepared = root / "prepared"
    run_data(load_config(args.config, [f"run_dir={prepared}", *common]))
    runs = {}
    for name in ("continued", "fresh"):
        runs[name] = root / name
        for stage in ("vocab", "data"):
            shutil.copytree(prepared / stage, runs[name] / stage)
    first, _ = timed_pretrain(runs["continued"], [*common, f"train.max_steps={n}"], args.config)
    continued, segments = timed_pretrain(runs["continued"], [*common, f"train.max_steps={2 * n}"], args.config)
    fresh, fresh_segments = timed_pretrain(runs["fresh"], [*common, f"train.max_steps={2 * n}"], args.config)
    trained = {"continued": segments[-1]["end_step"] - segments[-1]["start_step"],
               "fresh": fresh_segments[-1]["end_step"] - fresh_segments[-1]["start_step"]}
    print(f"\nfirst run of {n} steps: {first:.1f} s")
    print("| to 2N steps | steps trained | wall s | vs fresh |")
    print("|---|---:|---:|---:|")
    print(f"| continued from N | {trained['continued']} | {continued:.1f} | {continued / fresh:.2f} |")
    print(f"| fresh | {trained['fresh']} | {fresh:.1f} | 1.00 |")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
