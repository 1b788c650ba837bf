"""The model-step benchmark runs end to end (numbers are recorded in docs/, never asserted)."""

import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
def test_model_step_bench_reports_both_models(tmp_path, monkeypatch):
    """In this process (its memory runs are still child processes of their own, as the script makes them)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import model_step

    out = tmp_path / "result.json"
    model_step.main(
        [
            "--preset",
            "tiny",
            "--vocab-size",
            "500",
            "--seq",
            "32",
            "--batch",
            "2",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--json",
            str(out),
        ]
    )
    result = json.loads(out.read_text())
    assert result["predictions"] == 5  # round(0.15 * 32)
    for name in ("ours", "transformers"):
        assert result["speed"][name]["tokens_per_s"] > 0
        assert result["peak_memory_bytes"][name] > 0
    assert result["speed"]["speedup"] == pytest.approx(
        result["speed"]["ours"]["tokens_per_s"] / result["speed"]["transformers"]["tokens_per_s"]
    )
