"""bench/cpu_linear.py on a small size: every layer and the forward timed each way, the three
paths giving the same logits (its figures go to BENCHMARKS.md, never asserted)."""

import pytest
import torch

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@needs_onednn
def test_cpu_linear_times_each_path_and_they_agree():
    from bench.cpu_linear import PATHS, main

    result = main(["--preset", "tiny", "--batch", "2", "--seq", "16", "--threads", "1", "--rounds", "2"])
    assert [row["layer"] for row in result["layers"]] == [
        "q, k, v",
        "attention output",
        "FFN first, activation",
        "FFN second",
    ]
    for row in [*result["layers"], result["forward"]]:
        assert all(row[side] > 0 for side in PATHS), row
    assert result["forward"]["max_logit_difference"] < 1e-4
    assert result["onednn_faster"] == result["cpu_capability"].startswith("AVX512")
