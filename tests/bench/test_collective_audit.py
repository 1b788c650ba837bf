"""The collective audit (bench/collective_audit.py) on CPU: two threads run the real pretraining loop
through the audited group with no violation and end where one rank does; a host tensor handed to a
collective of a group that expects CUDA is a violation naming the op, the device and the caller; a
failing rank neither hangs the other nor leaves torch.distributed changed."""

import argparse
import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pipelines.train.distributed import all_reduce_sum

BENCH = Path(__file__).resolve().parents[2] / "bench"

pytestmark = pytest.mark.slow


@pytest.fixture
def audit(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs: it imports synthetic_rows beside it
    import collective_audit

    return collective_audit


def assert_torch_distributed_restored() -> None:
    assert not dist.is_initialized() and torch._C._is_multithreading_enabled()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t = torch.ones(2)
        dist.all_reduce(t)
        assert dist.get_backend() == "gloo" and t.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_two_threads_run_the_loop_on_the_expected_device_and_end_where_one_rank_does(audit, tmp_path):
    result = audit.audit_phase(argparse.Namespace(out=tmp_path, device="cpu"))
    assert result["violations"] == []
    calls = result["calls"]["2"]
    assert {"all_gather", "reduce_scatter", "all_reduce"} <= calls.keys()  # FSDP2's, the step's sums
    assert {"gather", "scatter", "broadcast"} <= calls.keys()  # DCP's object collectives
    assert calls["reduce_scatter"] == 2 * 6  # one per rank per step: FSDP2's single unit
    assert all(devices.keys() == {"cpu"} for devices in result["tensors_by_device"]["2"].values())
    assert result["max_abs_weight_difference"] <= 1e-5 and result["weights_match"]
    assert json.loads((tmp_path / "collective_audit.json").read_text())["world"] == 2
    assert_torch_distributed_restored()


def test_a_host_tensor_in_an_all_reduce_of_a_cuda_group_is_a_violation(audit):
    expects_cuda, sums = audit.CollectiveAudit("cuda"), {}

    def rank_main(rank: int) -> None:
        sums[rank] = all_reduce_sum(torch.full((3,), rank + 1.0, dtype=torch.float64)).tolist()

    audit.run_ranks(2, rank_main, expects_cuda, timeout=60)
    assert sums == {0: [3.0] * 3, 1: [3.0] * 3}  # recorded, then run
    violations = expects_cuda.summary()["violations"]
    assert sorted(v["rank"] for v in violations) == [0, 1]
    for v in violations:
        assert (v["op"], v["method"], v["device"], v["dtype"]) == ("all_reduce", "allreduce", "cpu", "float64")
        assert tuple(v["shape"]) == (3,)
        assert v["where"][0].startswith("pipelines/train/distributed.py:") and v["where"][0].endswith(
            "in all_reduce_sum"
        )
    assert audit.CollectiveAudit("cpu").summary()["violations"] == []


def test_a_failing_rank_ends_the_other_and_leaves_torch_distributed_as_it_was(audit):
    def rank_main(rank: int) -> None:
        if rank == 1:
            raise ValueError("rank 1 fails before the collective")
        dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1

    with pytest.raises(RuntimeError, match="rank 1 of 2 failed: ValueError") as raised:
        audit.run_ranks(2, rank_main, audit.CollectiveAudit("cpu"), timeout=60)
    assert isinstance(raised.value.__cause__, ValueError)
    assert_torch_distributed_restored()
