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


def test_the_replica_against_the_pipeline_without_ray(tiny_pretrained, tmp_path):
    """--no-ray (the GPU suite's predict phase, for a machine without Ray): the stage's Predictor and
    transformers' pipeline in this process on the same rows: in fp32 they agree on every row; in bf16
    (rounding differs with each batch's padded width) on nearly every row."""
    from bench.predict_throughput import main

    spiece = f"{tiny_pretrained}/spiece.model"
    for dtype in ("fp32", "bf16"):
        result = main(["--no-ray", "--rows", "200", "--seq", "32", "--spiece", spiece, "--dtype", dtype])
        assert result["rows"] == 200 and result["dtype"] == dtype and result["device"] == "cpu"
        assert result["agreement"] >= (1.0 if dtype == "fp32" else 0.95), result
        assert result["ours_encode_s"] < result["ours_total_s"]
