"""How long sentence-order prediction sits at chance on a task whose order is learnable.

    .venv/bin/python bench/sop_plateau.py --hidden 64 --layers 2 --lr 0.001 --seeds 0,1,2,3 --steps 600

The synthetic task: the first segment's pieces come from ids 10-99, the second's from 110-199;
label 1 means the segments were swapped. A model whose attention is uniform cannot see which
segment comes first (the mean of token + type embeddings is the same either way), so SOP starts on
a plateau at ln 2 even here. For each seed this trains the tiny model through the pipeline's own
`collate` and `train_step` (AdamW, 10 warmup steps, linear decay, batch 32, one masked position)
and prints the first step whose batch SOP accuracy reaches 0.95 ("never" if none) and the final
held-out accuracy. tests/pipelines/train/test_sop_learns.py uses the task defined here.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from pipelines.prep.process import example_schema
from pipelines.train.batching import collate
from pipelines.train.schedule import build_scheduler
from pipelines.train.step import StepMetrics, train_step

HELD_OUT = range(10_000, 10_008)  # batch seeds never trained on


def model_config(hidden: int, layers: int) -> AlbertConfig:
    return AlbertConfig(
        vocab_size=211,
        embedding_size=16,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=64,
    )


def ordered_pairs(seed: int, batch: int = 32, lengths: tuple[int, int] = (3, 7), swap_labels: bool = False) -> dict:
    """One batch of example rows (the parquet schema, static masks): segments of lengths[0] to
    lengths[1] - 1 pieces. swap_labels rotates the labels to other rows: nothing left to learn."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list] = {name: [] for name in example_schema(False).names}
    for i in range(batch):
        a, b = rng.integers(10, 100, int(rng.integers(*lengths))), rng.integers(110, 200, int(rng.integers(*lengths)))
        label = int(rng.integers(0, 2))
        first, second = (a, b) if label == 0 else (b, a)
        ids = np.r_[2, first, 3, second, 3]
        position = int(rng.integers(1, len(first) + 1))
        rows["masked_lm_ids"].append(ids[[position]].copy())
        ids[position] = 4
        rows["example_id"].append(f"{seed}-{i}")
        rows["input_ids"].append(ids)
        rows["token_type_ids"].append(np.r_[np.zeros(len(first) + 2), np.ones(len(second) + 1)])
        rows["masked_lm_positions"].append(np.array([position]))
        rows["sentence_order_label"].append(label)
    if swap_labels:
        rows["sentence_order_label"] = rows["sentence_order_label"][1:] + rows["sentence_order_label"][:1]
    return rows


def train(model: AlbertForPreTraining, steps: int, lr: float, **pairs) -> list[StepMetrics]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    scheduler = build_scheduler(optimizer, warmup_steps=10, total_steps=steps)
    return [
        train_step(model, optimizer, scheduler, [collate(ordered_pairs(step, **pairs), 1)], max_grad_norm=1.0).get()
        for step in range(steps)
    ]


def held_out_accuracy(model: AlbertForPreTraining, lengths: tuple[int, int] = (3, 7)) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for seed in HELD_OUT:
            batch = collate(ordered_pairs(seed, lengths=lengths), 1)
            logits = model(
                batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_positions"]
            ).sop_logits
            correct += int((logits.argmax(-1) == batch["sentence_order_label"]).sum())
            total += len(logits)
    model.train()
    return correct / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2, help="applications of the shared layer")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--lengths", default="3,7", help="segment lengths: low, high (exclusive)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = tuple(int(x) for x in args.lengths.split(","))
    print("| hidden | layers | lr | segment pieces | seed | first step >= 0.95 | held-out SOP acc | s |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for seed in (int(s) for s in args.seeds.split(",")):
        torch.manual_seed(seed)
        model = AlbertForPreTraining(model_config(args.hidden, args.layers))
        started = time.time()
        metrics = train(model, args.steps, args.lr, lengths=lengths)
        hit = next((i for i, m in enumerate(metrics) if m.sop_accuracy >= 0.95), "never")
        print(
            f"| {args.hidden} | {args.layers} | {args.lr:g} | {lengths[0]}-{lengths[1] - 1} | {seed} | {hit} | "
            f"{held_out_accuracy(model, lengths):.3f} | {time.time() - started:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
