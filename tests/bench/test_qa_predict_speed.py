"""bench/qa_predict_speed.py end to end on a small size: the QA family's inference and the plain
transformers loop build the same windows and give the same answers (its figures go to
BENCHMARKS.md, never asserted)."""

import pytest


def test_qa_bench_runs_both_on_the_same_windows_and_they_agree(tiny_pretrained):
    from bench.qa_predict_speed import main

    result = main(
        ["--preset", "tiny", "--rows", "12", "--seq", "64", "--query", "24", "--stride", "24"]
        + ["--batch-size", "8", "--spiece", tiny_pretrained, "--padding", "longest", "--rounds", "1"]
        + ["--without-kernels", "--roofline"]
    )
    assert result["questions"] == 12 and result["windows"] > 2 * 12  # several windows a question
    assert result["same_windows"] and result["agreement"] == 1.0, result
    assert result["ours_questions_per_s"] > 0 and result["transformers_questions_per_s"] > 0
    assert result["ours_without_kernels_questions_per_s"] > 0 and result["kernels_same_answers"] == 1.0
    # --roofline: the rates and the ceiling they give (its FLOP count: the test below)
    assert result["model_gflop"] > 0 and result["gemm_peak_gflop_per_s"] > 0
    ceiling = result["gemm_peak_gflop_per_s"] / result["transformers_gflop_per_s"]
    assert result["ceiling_vs_transformers"] == pytest.approx(ceiling, rel=1e-9)


def test_the_roofline_counts_the_flops_torch_counts():
    """encoder_flops is what torch's FLOP counter counts of the QA model's forward (attention as
    products: SDPA's math path), at two window lengths."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from albert_model import AlbertConfig
    from albert_model.model import AlbertForQuestionAnswering
    from bench.qa_predict_speed import encoder_flops

    config = AlbertConfig.from_preset("tiny", vocab_size=1000)
    model = AlbertForQuestionAnswering(config).eval()
    keys = ("hidden_size", "intermediate_size", "embedding_size", "num_hidden_layers")
    for n in (17, 64):
        ids = torch.randint(5, 1000, (1, n))
        with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counted:
            model(input_ids=ids, attention_mask=torch.ones_like(ids), token_type_ids=torch.zeros_like(ids))
        assert encoder_flops({k: getattr(config, k) for k in keys}, [n]) == counted.get_total_flops(), n
