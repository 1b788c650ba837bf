"""The step's input on the host: batches prefetched by a
background thread, and the copy to the device that drops an attention mask without padding."""

import threading
import time

import pytest
import torch

from pipelines.train.loader import prefetch, to_device


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
