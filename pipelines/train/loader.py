"""A global batch (an Arrow table of example rows) to this worker's collated micro-batches.

Each worker reads its own contiguous share of step k's global batch (pipelines/train/input.py),
so which examples form the batch does not depend on the number of workers: 1 worker and N
workers (and any gradient accumulation) see the same data at every step.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from ..prep.masking import MaskingSpec
from .batching import collate


def table_columns(table: pa.Table) -> dict[str, list]:
    """Columns as Python sequences for `collate`; list columns as one numpy array per row, cut
    from the column's flat values (no per-element Python objects)."""
    out: dict[str, list] = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_list(column.type):
            offsets = column.offsets.to_numpy()
            values = column.values.to_numpy(zero_copy_only=False)
            out[name] = [values[offsets[i] : offsets[i + 1]] for i in range(len(column))]
        else:
            out[name] = column.to_pylist()
    return out


def rank_micro_batches(
    table: pa.Table,
    rank: int,
    world: int,
    micro_batch: int,
    max_predictions: int,
    masking: MaskingSpec | None = None,
    seed: int = 0,
    epoch: int = 0,
) -> list[dict[str, torch.Tensor]]:
    """This rank's share of a global batch, split into micro-batches of `micro_batch` rows."""
    if len(table) % world:
        raise ValueError(f"a global batch of {len(table)} rows does not split over {world} workers")
    share = len(table) // world
    mine = table.slice(rank * share, share)
    return [
        collate(table_columns(mine.slice(start, micro_batch)), max_predictions, masking=masking, seed=seed, epoch=epoch)
        for start in range(0, share, micro_batch)
    ]


def position_of_step(step: int, batches_per_epoch: int) -> tuple[int, int]:
    """(epoch, batch within the epoch) of optimizer step `step` (0-based)."""
    if batches_per_epoch < 1:
        raise ValueError("an epoch must hold at least one global batch")
    return divmod(step, batches_per_epoch)


def mean_width(micro_batches: list[dict[str, torch.Tensor]]) -> float:
    """Mean padded sequence length, the S of the attention FLOPs."""
    return float(np.mean([mb["input_ids"].shape[1] for mb in micro_batches]))
