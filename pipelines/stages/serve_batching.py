"""A replica's batching: rows from concurrent requests join one queue, and a batch is taken from it
when the model is free, not before.

Serve's own `serve.batch` takes the next batch as soon as the previous one has started (within its
wait, ~10 ms), then holds it until the model is free: under load every batch is what arrived in
the first 10 ms of the one before, a few rows, whatever the queue holds by the time the model could
take them. Measured on the 2-vCPU VM with 64 clients (docs/BENCHMARKS.md, "Serving under load"):
~4 rows a batch with ~60 requests waiting in the replica, so the model ran many small passes and
the per-pass cost took the CPU the requests needed. Here a batch is formed when the last one has
finished: everything queued meanwhile, up to the batch size (Triton's dynamic batcher and
text-embeddings-inference batch the same way). The wait for more rows counts from a batch's first
row's arrival, so a row that waited for the model runs at once and a lone caller waits `wait_s`
at most, as with Serve's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass
class Queued(Generic[Item]):
    item: Item
    future: asyncio.Future
    arrived: float = field(default_factory=time.monotonic)


class Batcher(Generic[Item, Result]):
    """`await batcher(item)`: the item's result from `run(items)` over a batch of up to `max_size`
    items (in their order of arrival), one batch at a time. A batch's failure is each of its callers'
    exception; a caller that has gone (cancelled) is left out of the batch it would have joined."""

    def __init__(self, run: Callable[[list[Item]], Awaitable[list[Result]]], max_size: int, wait_s: float):
        self.run, self.max_size, self.wait_s = run, max_size, wait_s
        self.queue: asyncio.Queue[Queued[Item]] = asyncio.Queue()
        self.task: asyncio.Task | None = None
        self.batches = self.items = 0

    async def __call__(self, item: Item) -> Result:
        if self.task is None or self.task.done():  # started in the replica's event loop, on first use
            self.task = asyncio.get_running_loop().create_task(self.loop())
        queued = Queued(item, asyncio.get_running_loop().create_future())
        self.queue.put_nowait(queued)
        return await queued.future

    async def next_batch(self) -> list[Queued[Item]]:
        """The next batch: what is queued now, and what arrives until the first row has waited wait_s
        or the batch is full."""
        batch = [await self.queue.get()]
        while len(batch) < self.max_size:
            if not self.queue.empty():
                batch.append(self.queue.get_nowait())
                continue
            left = batch[0].arrived + self.wait_s - time.monotonic()
            if left <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(self.queue.get(), left))
            except TimeoutError:
                break
        return [queued for queued in batch if not queued.future.done()]

    async def loop(self) -> None:
        while True:
            batch = await self.next_batch()
            if not batch:
                continue
            self.batches, self.items = self.batches + 1, self.items + len(batch)
            try:
                results = await self.run([queued.item for queued in batch])
            except Exception as e:  # each caller's answer; the loop goes on with the next batch
                for queued in batch:
                    if not queued.future.done():
                        queued.future.set_exception(e)
                continue
            for queued, result in zip(batch, results, strict=True):
                if not queued.future.done():
                    queued.future.set_result(result)

    def served(self) -> dict[str, Any]:
        """Batches run and items in them so far (a replica's GET answer shows them)."""
        return {"batches": self.batches, "rows": self.items}


__all__ = ["Batcher"]
