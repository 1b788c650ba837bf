"""A global batch (an Arrow table of example rows) to this worker's collated micro-batches.

Each worker reads its own contiguous share of step k's global batch (pipelines/train/input.py),
so which examples form the batch does not depend on the number of workers: 1 worker and N
workers (and any gradient accumulation) see the same data at every step.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

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


def to_device(mb: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor | None]:
    """A collated micro-batch on `device`. An attention mask without padding becomes None (checked
    on the host, before the copy): SDPA then may use its flash / cuDNN kernels, which take no mask.
    From pinned memory on CUDA the copies do not block the host."""
    out: dict[str, torch.Tensor | None] = {k: v.to(device, non_blocking=True) for k, v in mb.items()}
    if bool(mb["attention_mask"].all()):
        out["attention_mask"] = None
    return out


T = TypeVar("T")


def prefetch(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """`items`, produced by a background thread up to `depth` ahead, so that reading and collating
    the next batches overlaps the device's step. Its errors are raised here; closing this
    generator stops the thread."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((end, None))
        except BaseException as error:  # noqa: B036 - handed to the consumer, raised there
            put((end, error))

    thread = threading.Thread(target=produce, name="batch-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item, error = ready.get()
            if error is not None:
                raise error
            if item is end:
                return
            yield item
    finally:
        stop.set()
        thread.join(timeout=10)


def mean_width(micro_batches: list[dict[str, torch.Tensor]]) -> float:
    """Mean padded sequence length, the S of the attention FLOPs."""
    return float(np.mean([mb["input_ids"].shape[1] for mb in micro_batches]))
