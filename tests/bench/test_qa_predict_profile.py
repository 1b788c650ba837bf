"""bench/qa_predict_profile.py on a small size: each side's time split into parts that are not
negative and add up to its wall time, the linear layers among them, and the encoder's forward with
and without the inference kernels giving the same logits (its figures go to BENCHMARKS.md, never
asserted)."""

import pytest


def test_qa_profile_splits_each_side_and_compares_the_kernels(tiny_pretrained):
    from bench.qa_predict_profile import main

    result = main(
        ["--preset", "tiny", "--rows", "6", "--batch-size", "2", "--rounds", "1", "--spiece", tiny_pretrained]
    )
    for side in ("ours", "transformers"):
        parts = {kind: s for kind, s in result[side].items() if kind != "wall"}
        assert all(s >= 0 for s in parts.values()), parts
        assert sum(parts.values()) == pytest.approx(result[side]["wall"])
        assert parts["linear layers"] > 0
    kernels = result["kernels"]
    assert kernels["with kernels"] > 0 and kernels["without"] > 0
    assert kernels["max_logit_difference"] < 1e-4
