"""bench/int8_kernels.py end to end at make run's shapes: every way of computing each weight
product runs and computes the float32 product within int8's error (its times go to
BENCHMARKS.md, never asserted)."""


def test_every_int8_product_runs_and_agrees_with_float32():
    from bench.int8_kernels import SHAPES, main

    result = main(["--rounds", "1", "--calls", "1"])
    products = result["products"]
    assert len(products) == len(SHAPES["make-run"])
    for sides in products.values():
        assert len(sides) == 5 and sides["float32 MatMul"]["max_relative_error"] == 0
        assert all(0 < s["max_relative_error"] < 0.05 and s["us"] > 0 for name, s in sides.items() if "int8" in name)
