"""GPU or CPU, decided before any worker starts, on fixed and on autoscaling clusters."""

import pytest

from pipelines.errors import BadInput
from pipelines.stages.pretrain_plan import resolve_gpu


@pytest.mark.parametrize(
    "setting, now, most, expected",
    [
        ("auto", 0, 0, False),  # a CPU cluster
        ("auto", 4, 4, True),
        ("auto", 0, 8, True),  # GPU nodes that start from zero, and an autoscaler that says so
        ("auto", 0, None, False),  # an autoscaler that does not say: CPUs, with a note to set true
        (True, 0, None, True),  # ... where true waits for the autoscaler to add them
        (True, 0, 8, True),
        (True, 2, 2, True),
        (False, 8, 8, False),
    ],
)
def test_gpus_now_or_later(setting, now, most, expected, capsys):
    assert resolve_gpu(setting, 2, now, most) is expected
    if setting == "auto" and most is None:
        assert "set train.use_gpu=true for GPU nodes that start from zero" in capsys.readouterr().out


def test_too_few_gpus_is_an_error_naming_what_the_cluster_can_have():
    with pytest.raises(BadInput, match=r"4 at least, but the cluster has 2 GPUs \(at most 3 with autoscaling\)$"):
        resolve_gpu(True, 4, 2, 3)
    with pytest.raises(BadInput, match="has 0 GPUs$"):
        resolve_gpu(True, 1, 0, 0)
    with pytest.raises(BadInput, match="has 1 GPUs; set train.use_gpu=false to train on CPUs"):
        resolve_gpu("auto", 2, 1, 1)
