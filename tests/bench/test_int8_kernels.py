"""bench/int8_kernels.py end to end at make run's shapes: every way of computing each weight
product runs; ours (7-bit weights) computes what exact integer sums give (numpy's, as a CPU with
VNNI sums) on every CPU, so nothing saturated; full-range weights do too only on a CPU with VNNI,
and on one without it their error is several times the exact sums' (the saturation
int8_cpu.PRODUCT_MAX avoids); torch's float32 Linear computes the float product and its dynamic int8
Linear an int8 one. Its times go to BENCHMARKS.md, never asserted."""

import pytest


def test_every_int8_product_runs_and_ours_never_saturates():
    from bench.int8_kernels import SHAPES, main

    result = main(["--rounds", "1", "--calls", "1"])
    products = result["products"]
    assert len(products) == len(SHAPES["make-run"])
    for sides in products.values():
        assert len(sides) == 6 and sides["float32 MatMul"]["max_relative_error"] == 0
        assert all(s["us"] > 0 for s in sides.values())
        error = {name: s["max_relative_error"] for name, s in sides.items()}
        assert all(0 < e < 0.05 for name, e in error.items() if name.startswith("uint8") or "static" in name)
        ours, full = sides["int8, per channel (ours)"], sides["int8, per channel, full range"]
        assert 0 < ours["exact_sum_error"] < 0.05 and 0 < full["exact_sum_error"] < 0.05
        assert ours["max_relative_error"] == pytest.approx(ours["exact_sum_error"], rel=1e-3)
        if result["u8s8_saturates"]:
            assert full["max_relative_error"] > 3 * full["exact_sum_error"]
        else:
            assert full["max_relative_error"] == pytest.approx(full["exact_sum_error"], rel=1e-3)
    assert result["torch"].keys() == products.keys()
    for in_torch in result["torch"].values():
        (fp32, fp32_side), (int8, int8_side) = in_torch.items()
        assert fp32 == "float32 Linear" and int8.startswith("int8 dynamic Linear")
        assert fp32_side["max_relative_error"] < 1e-5 and 1e-3 < int8_side["max_relative_error"] < 0.05
        assert fp32_side["us"] > 0 and int8_side["us"] > 0
