"""bench/onnx_int8.py end to end on a small size: the five sides (torch, onnxruntime fp32, our int8,
it with full-range weights, optimum's int8) on the same rows, fp32 agreeing with torch on every row,
our int8 file the smallest (full-range weights: the same size);
fp32 and our int8 with their attention fused too, and timed in onnxruntime's default session; each
onnxruntime side's profile by op type, our int8's weight products integer; QA through the onnx
backend against the transformers loop (its figures go to BENCHMARKS.md, never asserted)."""


def test_the_int8_bench_runs_every_side(tiny_pretrained):
    from bench.onnx_int8 import DEFAULT_SESSION, DEFAULT_SESSION_SIDES, FULL_RANGE, FUSED, FUSED_SIDES, SIDES, main

    result = main(
        ["--preset", "tiny", "--rows", "24", "--rounds", "2", "--spiece", tiny_pretrained, "--profile", "2"]
        + ["--qa-rows", "4", "--qa-rounds", "1"]
    )
    figures = result["classifier"]
    fused = [side + FUSED for side in FUSED_SIDES]
    assert list(figures) == list(SIDES) + fused + [side + DEFAULT_SESSION for side in DEFAULT_SESSION_SIDES]
    assert result["eval_rows"] == 24
    assert figures["ORT fp32"]["agreement_with_torch"] == figures["ORT fp32" + FUSED]["agreement_with_torch"] == 1.0
    assert all(result["attention_fusions"][side] == 4 for side in FUSED_SIDES)  # a depth step each
    files = {side: f["bytes"] for side, f in figures.items() if "bytes" in f}
    assert abs(files[FULL_RANGE] - files["ORT int8 (ours)"]) < 1000  # the same tensors, other values
    assert files["ORT int8 (ours)"] < min(
        size for side, size in files.items() if "int8 (ours)" not in side and side != FULL_RANGE
    )
    assert all(f["ms_batch1"] > 0 and f["ms_batch32"] > 0 for f in figures.values())
    profiles = {side: f["us_per_op_batch1"] for side, f in figures.items() if side != "torch fp32"}
    assert len(profiles) == 8 and all(sum(p.values()) > 0 for p in profiles.values())
    assert all("MultiHeadAttention" in profiles[side] and "Softmax" not in profiles[side] for side in fused)
    assert "MultiHeadAttention" not in profiles["ORT int8 (optimum)"]  # each side its own file
    assert "DynamicQuantizeMatMul" in profiles["ORT int8 (ours)"] and "MatMul" in profiles["ORT fp32"]
    assert "DynamicQuantizeMatMul" in profiles[FULL_RANGE]
    assert "SkipLayerNormalization" in profiles["ORT fp32" + DEFAULT_SESSION]
    assert "SkipLayerNormalization" not in profiles["ORT fp32"]
    qa = result["qa"]
    assert qa["questions"] == 4 and qa["onnx fp32"]["same_answers"] == 1.0 and qa["onnx int8"]["questions_per_s"] > 0
