"""The replica's batching (pipelines/stages/serve_batching.py): rows that arrive while a batch runs
are the next batch together, up to its size; a lone row runs alone after its wait; a batch's failure
is each of its callers' and the next batch runs; a caller that has gone is left out."""

from __future__ import annotations

import asyncio

import pytest

from pipelines.stages.serve_batching import Batcher


class Model:
    """A stand-in for the predictor: records each batch; a batch runs until `release` is set."""

    def __init__(self, fail_on: str | None = None):
        self.batches: list[list[str]] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.fail_on = fail_on

    async def run(self, items: list[str]) -> list[str]:
        self.batches.append(items)
        self.started.set()
        await self.release.wait()
        if self.fail_on in items:
            raise RuntimeError(f"failed on {self.fail_on}")
        return [item.upper() for item in items]


async def until(condition) -> None:
    while not condition():
        await asyncio.sleep(0.001)


async def busy(model: Model) -> tuple[Batcher, asyncio.Future]:
    """A batcher over `model` (8 rows a batch, 5 ms wait) whose first batch, of row "a", is running."""
    batcher = Batcher(model.run, max_size=8, wait_s=0.005)
    first = asyncio.ensure_future(batcher("a"))
    await model.started.wait()
    return batcher, first


def test_rows_arriving_while_a_batch_runs_are_the_next_batch_together():
    # Serve's serve.batch takes the next batch within its wait after the previous one starts, so of
    # rows that arrive one by one while the model is busy, the next batch holds only the first
    async def scenario():
        model = Model()
        batcher, first = await busy(model)
        later = []
        for i in range(12):  # one at a time, well after the first batch began
            later.append(asyncio.ensure_future(batcher(f"r{i}")))
            await asyncio.sleep(0.01)
        model.release.set()
        return model.batches, await first, await asyncio.gather(*later)

    batches, first, later = asyncio.run(scenario())
    assert first == "A" and later == [f"R{i}" for i in range(12)]
    assert batches == [["a"], [f"r{i}" for i in range(8)], [f"r{i}" for i in range(8, 12)]]


def test_a_lone_row_runs_after_its_wait_without_company():
    async def scenario():
        model = Model()
        model.release.set()
        batcher = Batcher(model.run, max_size=8, wait_s=0.005)
        return await batcher("x"), await batcher("y"), model.batches

    assert asyncio.run(scenario()) == ("X", "Y", [["x"], ["y"]])


def test_a_failed_batch_fails_each_of_its_callers_and_the_next_batch_runs():
    async def scenario():
        model = Model(fail_on="bad")
        batcher = Batcher(model.run, max_size=8, wait_s=0.05)
        calls = [asyncio.ensure_future(batcher(item)) for item in ("ok", "bad")]
        await until(lambda: model.batches)
        model.release.set()
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        return outcomes, await batcher("after"), model.batches

    outcomes, after, batches = asyncio.run(scenario())
    assert [str(o) for o in outcomes] == ["failed on bad", "failed on bad"]
    assert all(isinstance(o, RuntimeError) for o in outcomes)
    assert after == "AFTER" and batches == [["ok", "bad"], ["after"]]


def test_a_caller_that_has_gone_is_left_out_of_the_batch():
    async def scenario():
        model = Model()
        batcher, first = await busy(model)
        gone, stays = asyncio.ensure_future(batcher("gone")), asyncio.ensure_future(batcher("stays"))
        await asyncio.sleep(0.01)
        gone.cancel()
        model.release.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await first, await stays, model.batches

    assert asyncio.run(scenario()) == ("A", "STAYS", [["a"], ["stays"]])
