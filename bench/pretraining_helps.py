"""Does pretraining help? Fine-tune the same architecture on the embedded BBC News task twice under
the same budget: from the pretrained weights and from a random initialisation.

    .venv/bin/python bench/pretraining_helps.py --pretrained /tmp/albert-learning/pretrain/hf

Both arms: one trial with the same fixed hyperparameters (no search), the same seeded 80/20
stratified split, sequence length and epochs. Prints a markdown table for docs/BENCHMARKS.md.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import ray

from pipelines.config import load_config
from pipelines.finetune import run_finetune

BUDGET = ["finetune.max_seq_length=128", "finetune.epochs=3", "tune.num_samples=1", "tune.scheduler=none",
          "tune.space={finetune.lr: 0.001, finetune.batch_size: 32, finetune.warmup_ratio: 0.1}"]


def arm(run_dir: str, pretrained: str, init: str, overrides: list[str]) -> dict:
    config = load_config(None, [f"run_dir={run_dir}/{init}", f"finetune.pretrained={pretrained}",
                                f"finetune.init={init}", *BUDGET, *overrides])
    started = time.time()
    out = run_finetune(config)
    best = json.loads(Path(out, "best.json").read_text())
    return {"init": init, "seconds": time.time() - started, **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="a transformers ALBERT directory (pretrain/hf)")
    parser.add_argument("--run-dir", default="/tmp/albert-pretraining-helps")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ray.init(logging_level="WARNING")
    results = [arm(args.run_dir, args.pretrained, init, args.overrides) for init in ("pretrained", "random")]
    print(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
