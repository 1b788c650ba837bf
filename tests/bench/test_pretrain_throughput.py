"""The pretraining-step benchmark runs end to end and times the same work for both models
(numbers are recorded in docs/, never asserted)."""

from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs: it imports model_step beside it
    import pretrain_throughput

    return pretrain_throughput


@pytest.mark.slow
def test_reports_speed_mfu_and_memory_for_both_models(bench, tmp_path):
    out = tmp_path / "result.json"
    result = bench.main(
        [
            "--device",
            "cpu",
            "--configs",
            "tiny-64",
            "--batch-size",
            "2",
            "--steps",
            "1",
            "--warmup",
            "1",
            "--rounds",
            "2",
            "--peak-tflops",
            "1.0",
            "--json",
            str(out),
        ]
    )
    assert out.exists()
    assert [row["impl"] for row in result["rows"]] == ["ours", "transformers"]
    for row in result["rows"]:
        assert row["predictions"] == 10  # round(0.15 * 64)
        assert len(row["step_s_all"]) == 2
        assert row["tokens_per_s"] > 0
        assert row["sequences_per_s"] == pytest.approx(row["tokens_per_s"] / 64)
        assert row["mfu"] == pytest.approx(row["tokens_per_s"] * row["flops_per_token"] / 1e12)
        assert row["peak_memory_bytes"] > 0  # at least gradients and the LAMB moments
    assert result["rows"][0]["flops_per_token"] == result["rows"][1]["flops_per_token"]
    assert "--configs tiny-64 --batch-size 2" in result["command"]


def test_mfu_is_not_guessed_on_cpu(bench):
    assert bench.peak_tflops(bench.parse_args(["--device", "cpu"])) is None
    assert bench.peak_tflops(bench.parse_args(["--device", "cpu", "--peak-tflops", "2.5"])) == 2.5


@pytest.mark.slow
def test_ours_and_transformers_take_the_same_steps(bench):
    """Same weights and batch: the same loss before and after a clipped LAMB step, so both sides
    of the comparison do the same work."""
    torch.manual_seed(0)
    steps = bench.build_steps("tiny-64", 2, "cpu", "fp32")
    losses = {impl: [float(step()) for _ in range(3)] for impl, step in steps.items()}
    assert losses["ours"] == pytest.approx(losses["transformers"], abs=1e-4)
    assert losses["ours"][0] != pytest.approx(losses["ours"][2], abs=1e-3)  # the optimizer did move them
