"""bench/ner_predict_speed.py end to end on a small size: the family's inference and transformers'
token-classification pipeline run on the same model and rows and find the same entities (its
figures go to BENCHMARKS.md, never asserted)."""

from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs beside bench/'s other modules
    import ner_predict_speed

    return ner_predict_speed


def test_both_contenders_tag_the_same_rows_alike(bench, tiny_pretrained, tmp_path):
    out = tmp_path / "result.json"
    result = bench.main(
        ["--rows", "40", "--seq", "64", "--spiece", f"{tiny_pretrained}/spiece.model", "--out", str(out)]
    )
    assert result["rows"] == 40 and result["entities"] > 40  # a random model tags many words as entities
    assert result["entities_equal"] == 1.0 and result["rows_equal"] == 1.0
    assert result["ours_rows_per_s"] > 0 and result["transformers_rows_per_s"] > 0 and out.exists()
