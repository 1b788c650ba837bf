"""Does pretraining help? Fine-tune the same architecture on the embedded BBC News task (or, given
`finetune.*` overrides, another task) twice under the same budget: from the pretrained weights and
from a random initialisation.

    .venv/bin/python bench/pretraining_helps.py --pretrained /tmp/albert-learning/pretrain/hf --epochs 1,2,3
    .venv/bin/python bench/pretraining_helps.py --pretrained runs/qa-demo/pretrain/hf --epochs 2 \
        finetune.task=question_answering finetune.max_seq_length=256 \
        finetune.max_train_examples=1000 finetune.max_eval_examples=300      # the QA demo, by F1

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
from pipelines.stages.finetune import run_finetune

# The budget of tests/pipelines/test_pretrain_learns.py; `--epochs` varies it.
BUDGET = ["finetune.max_seq_length=128", "tune.num_samples=1", "tune.scheduler=none"]


def arm(run_dir: str, pretrained: str, init: str, epochs: int, lr: float, overrides: list[str]) -> dict:
    space = f"tune.space={{finetune.lr: {lr}, finetune.batch_size: 32, finetune.epochs: {epochs}}}"
    config = load_config(
        None,
        [
            f"run_dir={run_dir}/{init}-{epochs}-{lr}",
            f"finetune.pretrained={pretrained}",
            f"finetune.init={init}",
            *BUDGET,
            space,
            *overrides,
        ],
    )
    started = time.time()
    out = run_finetune(config)
    best = json.loads(Path(out, "best.json").read_text())
    return {"init": init, "epochs": epochs, "lr": lr, "seconds": time.time() - started, **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pretrained", required=True, help="a transformers ALBERT directory (pretrain/hf)")
    parser.add_argument("--run-dir", default="/tmp/albert-pretraining-helps")
    parser.add_argument("--epochs", default="2", help="fine-tuning budgets to compare, e.g. 1,2,3")
    parser.add_argument("--lr", default="0.001", help="fine-tuning learning rates, e.g. 0.0003,0.001")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    ray.init(logging_level="WARNING")
    results = [
        arm(args.run_dir, args.pretrained, init, int(epochs), float(lr), args.overrides)
        for epochs in args.epochs.split(",")
        for lr in args.lr.split(",")
        for init in ("pretrained", "random")
    ]
    print(json.dumps(results, indent=2, default=str))
    print("| epochs | lr | pretrained | random |\n|---:|---:|---:|---:|")
    for i in range(0, len(results), 2):
        p, r = results[i], results[i + 1]
        print(f"| {p['epochs']} | {p['lr']:g} | {p['value']:.3f} | {r['value']:.3f} |")


if __name__ == "__main__":
    main()
