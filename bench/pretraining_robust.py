"""Does pretraining help, whatever the data order and the fine-tuning seed? The learning recipe
(configs/learning-tiny.yaml) pretrained on several data orders (`train.seed`: the initialisation,
the epochs' order of the examples and the dynamic masks), each encoder fine-tuned on BBC News with
several seeds against a random initialisation of the same architecture under the same budget (the
learning test's: one epoch at lr 3e-4, batch 32, sequence 128; `--task qa`: the question-answering
demo's, by F1), through the fine-tuning stage's own `finetune.compare_random` and `tune.repeats`.

    .venv/bin/python bench/pretraining_robust.py --run-dir /tmp/albert-robust --orders 42,7,1234 --repeats 2
    .venv/bin/python bench/pretraining_robust.py --run-dir /tmp/albert-robust --task qa   # the same encoders

Prints, per data order, the masked-LM accuracy and each seed's accuracy of both arms, then the mean
difference (pretrained - random, paired by fine-tuning seed) over all orders and seeds with its 95%
t-interval, and the mean difference of each order over the seeds. Also as JSON (`--json`).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
from pathlib import Path

import ray
from scipy import stats

from pipelines.config import load_config
from pipelines.stages.data import run_data
from pipelines.stages.finetune import run_finetune
from pipelines.stages.pretrain import run_pretrain

RECIPE = str(Path(__file__).resolve().parents[1] / "configs" / "learning-tiny.yaml")
# The fine-tuning budgets of the learning test (tests/pipelines/test_pretrain_learns.py reads them here): BBC News
# (accuracy) and the embedded question-answering demo (F1 on 300 of its cloze questions).
BUDGETS = {
    "bbc": [
        "finetune.max_seq_length=128",
        "tune.num_samples=1",
        "tune.scheduler=none",
        "tune.space={finetune.lr: 0.0003, finetune.batch_size: 32, finetune.epochs: 1}",
    ],
    "qa": [
        "finetune.task=question_answering",
        "finetune.max_seq_length=256",
        "finetune.max_train_examples=1000",
        "finetune.max_eval_examples=300",
        "tune.num_samples=1",
        "tune.scheduler=none",
        "tune.space={finetune.lr: 0.001, finetune.batch_size: 32, finetune.epochs: 2}",
    ],
}
UNIGRAM_PLATEAU = 0.069  # the validation masked-LM accuracy of predicting each token's corpus frequency


def pretrain(run_dir: Path, order: int, overrides: list[str]) -> dict:
    """The recipe's vocab and data once (in `prepared/`), pretraining once per order; rerunning the
    bench reuses what is complete (the stages' own up-to-date check)."""
    prepared = run_dir / "prepared"
    run_data(load_config(RECIPE, [f"run_dir={prepared}", *overrides]))
    encoder = run_dir / f"order-{order}"
    for stage in ("vocab", "data"):
        if not (encoder / stage).exists():
            shutil.copytree(prepared / stage, encoder / stage)
    run_pretrain(load_config(RECIPE, [f"run_dir={encoder}", f"train.seed={order}", *overrides]))
    return json.loads((encoder / "pretrain" / "eval.json").read_text())


def finetune(run_dir: Path, order: int, repeats: int, with_random: bool, task: str) -> dict[str, list[dict]]:
    """Both arms (or the pretrained one) on `repeats` + 1 fine-tuning seeds: {arm: [{seed, value}]}."""
    config = load_config(
        None,
        [
            f"run_dir={run_dir}/finetune-{order}" + ("" if task == "bbc" else f"-{task}"),
            f"finetune.pretrained={run_dir}/order-{order}/pretrain/hf",
            f"finetune.compare_random={str(with_random).lower()}",
            f"tune.repeats={repeats}",
            *BUDGETS[task],
        ],
    )
    out = Path(run_finetune(config))
    arms = {"pretrained": json.loads((out / "best.json").read_text())}
    if with_random:
        arms["random"] = json.loads((out / "random" / "best.json").read_text())
    return {arm: best["repeats"]["runs"] for arm, best in arms.items()}


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and its 95% t-interval."""
    mean = statistics.fmean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="/tmp/albert-robust")
    parser.add_argument("--orders", default="42,7,1234", help="train.seed of each pretraining run")
    parser.add_argument("--repeats", type=int, default=2, help="fine-tuning seeds beyond the first (tune.repeats)")
    parser.add_argument("--task", choices=sorted(BUDGETS), default="bbc", help="BBC News or the QA demo")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("overrides", nargs="*", help="key=value for the pretraining recipe (e.g. train.max_steps)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    ray.init(logging_level="WARNING", ignore_reinit_error=True)
    run_dir = Path(args.run_dir)
    orders = [int(o) for o in args.orders.split(",")]
    rows, random_arm = [], None
    for order in orders:
        evaluation = pretrain(run_dir, order, args.overrides)
        # the random arm does not depend on the encoder's weights (only its config): trained once
        arms = finetune(run_dir, order, args.repeats, random_arm is None, args.task)
        random_arm = random_arm or {r["seed"]: r["value"] for r in arms["random"]}
        for run in arms["pretrained"]:
            rows.append(
                {
                    "order": order,
                    "mlm_accuracy": evaluation["mlm_accuracy"],
                    "seed": run["seed"],
                    "pretrained": run["value"],
                    "random": random_arm[run["seed"]],
                }
            )
    differences = [r["pretrained"] - r["random"] for r in rows]
    mean, low, high = interval(differences)
    by_order = {o: statistics.fmean(r["pretrained"] - r["random"] for r in rows if r["order"] == o) for o in orders}
    print(f"\n{args.task}:")
    print("| data order (train.seed) | val MLM acc | fine-tuning seed | pretrained | random | difference |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['order']} | {r['mlm_accuracy']:.3f} | {r['seed']} | {r['pretrained']:.3f} | {r['random']:.3f} | "
            f"{r['pretrained'] - r['random']:+.3f} |"
        )
    plateau_left = sum(r["mlm_accuracy"] > UNIGRAM_PLATEAU for r in rows if r["seed"] == rows[0]["seed"])
    print(
        f"\nmean difference over {len(rows)} (order, seed) pairs: {mean:+.3f}, 95% interval [{low:+.3f}, {high:+.3f}]; "
        f"by order: {', '.join(f'{o}: {d:+.3f}' for o, d in by_order.items())}; "
        f"masked-LM accuracy above the unigram plateau ({UNIGRAM_PLATEAU}) in "
        f"{plateau_left} of {len(orders)} orders"
    )
    result = {"rows": rows, "mean_difference": mean, "interval_95": [low, high], "by_order": by_order}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
