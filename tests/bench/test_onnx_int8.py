"""bench/onnx_int8.py end to end on a small size: the four sides (torch, onnxruntime fp32, our int8,
optimum's int8) on the same rows, fp32 agreeing with torch on every row, our int8 file the smallest;
QA through the onnx backend against the transformers loop (its figures go to BENCHMARKS.md, never
asserted)."""


def test_the_int8_bench_runs_every_side(tiny_pretrained):
    from bench.onnx_int8 import SIDES, main

    result = main(
        ["--preset", "tiny", "--rows", "24", "--rounds", "2", "--spiece", tiny_pretrained]
        + ["--qa-rows", "4", "--qa-rounds", "1"]
    )
    figures = result["classifier"]
    assert list(figures) == list(SIDES) and result["eval_rows"] == 24
    assert figures["ORT fp32"]["agreement_with_torch"] == 1.0
    assert figures["ORT int8 (ours)"]["bytes"] < min(f["bytes"] for s, f in figures.items() if s != "ORT int8 (ours)")
    assert all(f["ms_batch1"] > 0 and f["ms_batch32"] > 0 for f in figures.values())
    qa = result["qa"]
    assert qa["questions"] == 4 and qa["onnx fp32"]["same_answers"] == 1.0 and qa["onnx int8"]["questions_per_s"] > 0
