"""bench/qa_predict_speed.py end to end on a small size: the QA family's inference and the plain
transformers loop build the same windows and give the same answers (its figures go to
BENCHMARKS.md, never asserted)."""


def test_qa_bench_runs_both_on_the_same_windows_and_they_agree(tiny_pretrained):
    from bench.qa_predict_speed import main

    result = main(
        ["--preset", "tiny", "--rows", "12", "--seq", "64", "--query", "24", "--stride", "24"]
        + ["--batch-size", "8", "--spiece", tiny_pretrained, "--padding", "longest", "--rounds", "1"]
        + ["--without-kernels"]
    )
    assert result["questions"] == 12 and result["windows"] > 2 * 12  # several windows a question
    assert result["same_windows"] and result["agreement"] == 1.0, result
    assert result["ours_questions_per_s"] > 0 and result["transformers_questions_per_s"] > 0
    assert result["ours_without_kernels_questions_per_s"] > 0 and result["kernels_same_answers"] == 1.0
