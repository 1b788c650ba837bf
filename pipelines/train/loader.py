"""A global batch (an Arrow table of example rows) to this worker's collated micro-batches, made
ahead of the step: in a thread of the training process, or in a process of its own.

Each worker reads its own contiguous share of step k's global batch (pipelines/train/input.py),
so which examples form the batch does not depend on the number of workers: 1 worker and N
workers (and any gradient accumulation) see the same data at every step.

Reading and collating are Python that holds the GIL (~12 ms per batch of 256 at sequence 128):
in a thread they take that time from the training thread, which on a GPU is the one queueing the
device's kernels. `loader_batches(..., processes=1)` makes them in a torch DataLoader worker
process instead (spawned; tensors come back through shared memory, pinned by the DataLoader).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import pyarrow as pa
import torch

from ..errors import BadInput, UserError
from ..prep.masking import MaskingSpec
from .batching import collate
from .input import SliceReader


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


@dataclass(frozen=True)
class TrainSplit:
    """Where a rank reads its training batches: the data stage's train split and the seed of its
    order (what a LoopIO hands the loop; picklable, so a loader process can read it too)."""

    split_dir: str
    seed: int


@dataclass(frozen=True)
class BatchSource:
    """This rank's collated micro-batches of every step: everything needed to make them, in the
    training process or in a loader process."""

    split: TrainSplit
    global_batch_size: int
    rank: int
    world: int
    micro_batch: int
    max_predictions: int
    masking: MaskingSpec | None
    batches_per_epoch: int
    """What the plan counted; a split holding another number of rows is refused."""

    def reader(self) -> SliceReader:
        reader = SliceReader(self.split.split_dir, self.global_batch_size, self.rank, self.world, self.split.seed)
        if reader.batches_per_epoch != self.batches_per_epoch:
            raise BadInput(
                f"{self.split.split_dir} holds {reader.index.num_rows} rows, {reader.batches_per_epoch} batches of "
                f"{self.global_batch_size}, not the {self.batches_per_epoch} batches its manifest.json counts: rerun "
                "the data stage"
            )
        return reader

    def steps(self, start_step: int, reader: SliceReader | None = None) -> Iterator[list[dict[str, torch.Tensor]]]:
        """The micro-batches of every step from optimizer step `start_step` on (epoch after epoch);
        a start mid-epoch reads nothing before its batch."""
        reader = reader or self.reader()
        epoch, first = position_of_step(start_step, self.batches_per_epoch)
        while True:
            for share in reader.epoch(epoch, first):
                yield rank_micro_batches(
                    share, 0, 1, self.micro_batch, self.max_predictions, self.masking, self.split.seed, epoch
                )
            first, epoch = 0, epoch + 1


class _Failed:
    """An expected error (a UserError) raised in the loader process, handed over as it is: the
    DataLoader would wrap it in its worker's traceback, and a UserError is one line."""

    def __init__(self, error: UserError):
        self.error = error


class _StepsDataset(torch.utils.data.IterableDataset):
    """The loader process's side: one item per step."""

    def __init__(self, source: BatchSource, start_step: int):
        super().__init__()
        self.source, self.start_step = source, start_step

    def __iter__(self):
        try:
            yield from self.source.steps(self.start_step)
        except UserError as error:
            yield _Failed(error)


def _one_thread(_: int) -> None:
    torch.set_num_threads(1)  # collating is numpy and Python: no intra-op threads to compete with training


def _unwrapped(items: Iterable) -> Iterator:
    for item in items:
        if isinstance(item, _Failed):
            raise item.error
        yield item


def loader_batches(
    source: BatchSource,
    start_step: int,
    processes: int,
    pin: bool,
    reader: SliceReader | None = None,
    depth: int = 4,
) -> Iterator[list[dict[str, torch.Tensor]]]:
    """The steps' micro-batches from `start_step` on, made up to `depth` steps ahead: by a thread
    (`processes=0`, `reader` reused if given) or by one spawned loader process (`processes=1`; a
    fork after CUDA or in a Ray worker's threads is unsafe). Pinned for a CUDA device (`pin`): a
    copy from pageable memory may wait for the device's queue. Close the generator to stop it."""
    if processes == 0:
        steps = source.steps(start_step, reader)
        if pin:
            steps = ([{k: v.pin_memory() for k, v in mb.items()} for mb in step] for step in steps)
        return prefetch(steps, depth=2)
    if processes != 1:
        raise ValueError("one loader process at most: the steps' order is one stream")
    loader = torch.utils.data.DataLoader(
        _StepsDataset(source, start_step),
        batch_size=None,
        num_workers=1,
        prefetch_factor=depth,
        pin_memory=pin,
        multiprocessing_context="spawn",
        worker_init_fn=_one_thread,
    )
    return _unwrapped(loader)


def mean_width(micro_batches: list[dict[str, torch.Tensor]]) -> float:
    """Mean padded sequence length, the S of the attention FLOPs."""
    return float(np.mean([mb["input_ids"].shape[1] for mb in micro_batches]))
