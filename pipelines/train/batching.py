"""Example rows (the parquet schema) to padded model batches, with dynamic masking when asked.

Batch keys are transformers' (`input_ids`, `token_type_ids`, `attention_mask`) plus the MLM
targets at fixed width `max_predictions_per_seq` (`masked_positions`, `masked_lm_ids`,
`masked_lm_weights`, weight 0 on padding) and `sentence_order_label` (SOP or NSP; absent where the
data has no sentence objective).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from ..prep.examples import stable_hash
from ..prep.masking import PAD_ID, MaskingSpec, mask_tokens


def dynamic_mask_rng(seed: int, epoch: int, example_id: str) -> np.random.Generator:
    """Masks differ per epoch and are the same for an example wherever it is read."""
    return np.random.default_rng([seed, epoch, stable_hash(example_id) & 0xFFFFFFFF])


def collate(
    rows: dict[str, Sequence],
    max_predictions: int,
    pad_to_multiple: int = 8,
    masking: MaskingSpec | None = None,
    seed: int = 0,
    epoch: int = 0,
) -> dict[str, torch.Tensor]:
    """Columns of a batch of examples -> padded tensors. With `masking`, rows hold unmasked ids and
    `word_starts`, and the masks are drawn here (dynamic masking)."""
    n = len(rows["input_ids"])
    ids_list = [np.asarray(x, dtype=np.int64) for x in rows["input_ids"]]
    if masking is not None:
        positions_list, labels_list = [], []
        for i in range(n):
            ex = mask_tokens(
                ids_list[i],
                np.asarray(rows["word_starts"][i], dtype=bool),
                masking,
                dynamic_mask_rng(seed, epoch, str(rows["example_id"][i])),
            )
            ids_list[i] = ex.input_ids.astype(np.int64)
            positions_list.append(ex.positions)
            labels_list.append(ex.labels)
    else:
        positions_list = [np.asarray(x, dtype=np.int64) for x in rows["masked_lm_positions"]]
        labels_list = [np.asarray(x, dtype=np.int64) for x in rows["masked_lm_ids"]]
    longest = max(len(x) for x in ids_list)
    width = -(-longest // pad_to_multiple) * pad_to_multiple
    input_ids = np.full((n, width), PAD_ID, dtype=np.int64)
    token_type_ids = np.zeros((n, width), dtype=np.int64)
    attention_mask = np.zeros((n, width), dtype=np.int64)
    positions = np.zeros((n, max_predictions), dtype=np.int64)
    labels = np.zeros((n, max_predictions), dtype=np.int64)
    weights = np.zeros((n, max_predictions), dtype=np.float32)
    for i in range(n):
        length, p = len(ids_list[i]), len(positions_list[i])
        if p > max_predictions:
            raise ValueError(
                f"example {rows['example_id'][i]}: {p} masked positions > max_predictions_per_seq {max_predictions}"
            )
        input_ids[i, :length] = ids_list[i]
        token_type_ids[i, :length] = rows["token_type_ids"][i]
        attention_mask[i, :length] = 1
        positions[i, :p], labels[i, :p], weights[i, :p] = positions_list[i], labels_list[i], 1.0
    batch = {
        "input_ids": torch.from_numpy(input_ids),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "masked_positions": torch.from_numpy(positions),
        "masked_lm_ids": torch.from_numpy(labels),
        "masked_lm_weights": torch.from_numpy(weights),
    }
    if "sentence_order_label" in rows:
        batch["sentence_order_label"] = torch.as_tensor(np.asarray(rows["sentence_order_label"], dtype=np.int64))
    return batch
