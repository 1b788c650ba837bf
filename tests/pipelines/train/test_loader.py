"""The step's input on the host: batches prefetched by a background thread or made by a loader
process, and the copy to the device that drops an attention mask without padding."""

import dataclasses
import multiprocessing
import threading
import time

import pyarrow.parquet as pq
import pytest
import torch

from pipelines.errors import BadInput
from pipelines.train.loader import BatchSource, TrainSplit, loader_batches, prefetch, to_device


def test_prefetch_keeps_the_order_and_runs_ahead():
    produced = []

    def items():
        for i in range(6):
            produced.append(i)
            yield i

    stream = prefetch(items(), depth=2)
    assert next(stream) == 0
    deadline = time.monotonic() + 5
    while len(produced) < 3 and time.monotonic() < deadline:  # 1 and 2 wait in the queue, 3 is being put
        time.sleep(0.01)
    assert len(produced) >= 3 and len(produced) <= 4
    assert list(stream) == [1, 2, 3, 4, 5]


def test_prefetch_raises_the_producers_error_where_it_is_consumed():
    def items():
        yield 1
        raise ValueError("part-00003.parquet: bad row group")

    stream = prefetch(items())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="part-00003.parquet"):
        next(stream)


def test_closing_the_prefetch_stops_its_thread():
    def endless():
        i = 0
        while True:
            yield i
            i += 1

    stream = prefetch(endless(), depth=2)
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()
    assert not any(t.name == "batch-prefetch" and t.is_alive() for t in threading.enumerate())


def test_to_device_drops_a_mask_without_padding_and_keeps_one_with():
    full = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    padded = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8, dtype=torch.long)}
    padded["attention_mask"][1, 6:] = 0
    assert to_device(full, torch.device("cpu"))["attention_mask"] is None
    kept = to_device(padded, torch.device("cpu"))["attention_mask"]
    assert torch.equal(kept, padded["attention_mask"])


# --- the loader process: the same steps as the thread, its errors as they are, stopped on close ---


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    from tests.pipelines.train.test_loop import TRAIN

    folder = tmp_path_factory.mktemp("split") / "train"
    folder.mkdir()
    pq.write_table(TRAIN.slice(0, 20), folder / "part-00000-000.parquet", row_group_size=4)
    pq.write_table(TRAIN.slice(20), folder / "part-00001-000.parquet", row_group_size=4)
    return BatchSource(TrainSplit(str(folder), 7), 8, 0, 1, 4, 3, None, 4)  # 32 rows: 4 steps an epoch, 2 micro


def take(stream, n: int) -> list:
    items = [next(stream) for _ in range(n)]
    stream.close()
    return items


def assert_same_steps(a: list, b: list) -> None:
    assert len(a) == len(b)
    for step_a, step_b in zip(a, b):
        assert len(step_a) == len(step_b) == 2
        for mb_a, mb_b in zip(step_a, step_b):
            assert mb_a.keys() == mb_b.keys()
            assert all(torch.equal(mb_a[k], mb_b[k]) for k in mb_a)


@pytest.mark.slow
def test_the_loader_process_makes_the_threads_steps(source):
    """Steps 2-7 (from mid-epoch 0 into epoch 1), in a process and in a thread."""
    in_process = take(loader_batches(source, 2, processes=1, pin=False), 6)
    assert_same_steps(in_process, take(loader_batches(source, 2, processes=0, pin=False), 6))
    assert not torch.equal(in_process[0][0]["input_ids"], in_process[1][0]["input_ids"])


@pytest.mark.slow
def test_an_expected_error_in_the_loader_process_arrives_as_itself(source):
    wrong = dataclasses.replace(source, batches_per_epoch=5)
    with pytest.raises(BadInput) as caught:
        next(loader_batches(wrong, 0, processes=1, pin=False))
    assert str(caught.value).startswith(f"{source.split.split_dir} holds 32 rows, 4 batches of 8, not the 5")
    assert "Traceback" not in str(caught.value)


@pytest.mark.slow
def test_closing_the_loader_stops_its_process(source):
    before = set(multiprocessing.active_children())
    stream = loader_batches(source, 0, processes=1, pin=False)
    next(stream)
    assert len(set(multiprocessing.active_children()) - before) == 1
    stream.close()
    deadline = time.monotonic() + 10
    while set(multiprocessing.active_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(multiprocessing.active_children()) - before
