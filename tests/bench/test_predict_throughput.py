"""bench/predict_throughput.py end to end on a small size: both contenders run on the same rows and
agree on every row (its figures, and the memory run at two sizes, go to BENCHMARKS.md)."""

import pytest


@pytest.mark.slow
def test_predict_bench_runs_both_and_they_agree(ray_session, tiny_pretrained, tmp_path):
    from bench.predict_throughput import main

    spiece = f"{tiny_pretrained}/spiece.model"
    result = main(
        ["--rows", "300", "--rows-large", "0", "--seq", "32", "--spiece", spiece, "--out", str(tmp_path / "r")]
    )
    assert result["agreement"] == 1.0
    assert set(result["peak_uss_mb"]) == {300} and result["peak_uss_mb"][300] > 0
    assert result["ours_rows_per_s"] > 0 and result["transformers_rows_per_s"] > 0
