"""bench/serve_replica.py (the GPU suite's serve phase, for a machine without Ray) on a small size:
the replica's batching and transformers' pipeline answer the same requests alike, and the replica
really batches concurrent requests."""


def test_the_serve_replica_against_the_pipeline(tiny_pretrained):
    from bench.serve_replica import main

    spiece = f"{tiny_pretrained}/spiece.model"
    for dtype in ("fp32", "bf16"):
        result = main(["--requests", "120", "--clients", "16", "--seq", "32", "--spiece", spiece, "--dtype", dtype])
        assert result["requests"] == 120 and result["dtype"] == dtype and result["device"] == "cpu"
        # bf16: rounding differs with each batch's padded width, a near tie can flip
        assert result["agreement"] >= (1.0 if dtype == "fp32" else 0.95), result
        assert result["ours"]["rows_per_batch"] > 1.5, result  # 16 callers: rows of several requests per pass
        for name in ("ours", "transformers"):
            assert result[name]["rows_per_s"] > 0 and result[name]["p99_ms"] >= result[name]["p50_ms"] > 0
