"""Synthetic example rows in the data stage's schema (static masks): the step's tests and bench/health_overhead.py."""

import numpy as np

from pipelines.prep.process import example_schema


def static_rows(step: int, batch: int, vocab_size: int, predictions: int, lengths: tuple[int, int]) -> dict:
    """`batch` rows [CLS] A [SEP] B [SEP] of lengths in [lo, hi) (all lo when lo == hi), with
    `predictions` masked positions in A; seeded by `step`, so the same in every process."""
    rng = np.random.default_rng(step)
    rows: dict[str, list] = {name: [] for name in example_schema(False).names}
    lo, hi = lengths
    for i in range(batch):
        length = lo if lo == hi else int(rng.integers(lo, hi))
        ids = rng.integers(5, vocab_size, length)
        ids[0], ids[length // 2], ids[-1] = 2, 3, 3
        positions = np.sort(rng.choice(np.arange(1, length // 2), size=predictions, replace=False))
        rows["example_id"].append(f"s{step}-{i}")
        rows["masked_lm_ids"].append(ids[positions].copy())
        ids[positions] = 4
        rows["input_ids"].append(ids)
        rows["token_type_ids"].append(np.r_[np.zeros(length // 2 + 1), np.ones(length - length // 2 - 1)])
        rows["masked_lm_positions"].append(positions)
        rows["sentence_order_label"].append(int(rng.integers(0, 2)))
    return rows
