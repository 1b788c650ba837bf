"""The int8 choices of `--quantize int8` at the kernel level (issue #46 item 5): one weight product
[S, K] x [K, N] (batch 1, sequence S) in onnxruntime on one thread, float32 against int8 computed
the ways onnxruntime offers, side by side in one run:

- DynamicQuantizeMatMul, int8 weights of 7 bits (|w| <= 63), a scale per output channel: what the
  export's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul becomes in onnxruntime (quantize.py);
- the same with full-range weights (|w| <= 127): on an x86 CPU without VNNI onnxruntime's kernel adds
  two uint8 x int8 products into an int16 that saturates (int8_cpu.PRODUCT_MAX), so there its error
  is several times ours (`u8s8_saturates` in the result says which CPU this is); for both, the
  error with sums that never saturate (`exact_sum_error`: numpy's exact integer product, what a CPU
  with VNNI computes) shows what the 7th bit costs where there is no saturation;
- full range with one scale for the whole matrix (per tensor: optimum's dynamic recipe);
- the same with uint8 weights (zero point 128): VNNI multiplies uint8 by int8, so uint8 x uint8
  needs another kernel;
- static activation quantization, as a calibrated QDQ model runs: QuantizeLinear with a fixed
  scale, then MatMulIntegerToFloat (the activation's min and max are not searched at run time).

Beside them, the one other int8 kernel at hand, as a contrast: torch's dynamic int8 `Linear`
(`torch.ao.quantization.quantize_dynamic`, its quantized engine's kernel: fbgemm on x86) against torch's
float32 `Linear` on the same weights and rows (`torch` in the result; the same rounds, interleaved).

The shapes are make run's model's weight products at sequence 128 (hidden 128, FFN 512: q/k/v
fused 128 -> 384, FFN 128 -> 512 and 512 -> 128) or ALBERT-base's (`--preset base`: 768 -> 2304,
768 -> 3072, 3072 -> 768). Each side is the median of `--rounds` rounds of `--calls` calls, the
sides interleaved (a change in the machine's load falls on all).

    python bench/int8_kernels.py                  # make run's sizes
    python bench/int8_kernels.py --preset base --rounds 10
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from pipelines.export.quantize import INT8_MAX
from pipelines.inference.int8_cpu import PRODUCT_MAX, u8s8_saturates

SHAPES = {"make-run": ((128, 384), (128, 512), (512, 128)), "base": ((768, 2304), (768, 3072), (3072, 768))}
"""(K, N) of each weight product, by model size."""
SEQ = 128
ACTIVATION_SCALE = 0.03
"""A static quantization's activation scale (a calibrated model's would come from its training rows;
the time does not depend on its value)."""


def exact_error(x: np.ndarray, w: np.ndarray, largest: int) -> float:
    """The largest error, relative to the float product's largest value, of x @ w computed as the
    export's int8 computes it with sums that never saturate (a CPU with VNNI, an ARM's dot products):
    x uint8 per tensor as DynamicQuantizeLinear quantizes it, w symmetric per channel in
    [-largest, largest], the integer product exact."""
    low, high = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (high - low) / 255
    zero = np.clip(np.round(-low / scale), 0, 255)
    xq = np.clip(np.round(x / scale) + zero, 0, 255) - zero
    w_scale = np.abs(w).max(axis=0) / largest
    product = (xq.astype(np.int64) @ np.round(w / w_scale).astype(np.int64)) * scale * w_scale
    reference = x.astype(np.float64) @ w
    return float(np.abs(product - reference).max() / np.abs(reference).max())


def weight_of(model: bytes) -> np.ndarray:
    """The float32 product model's weight w [k, n]."""
    return numpy_helper.to_array(onnx.load_model_from_string(model).graph.initializer[0])


def product_model(nodes, initializers, inputs) -> bytes:
    values = [
        helper.make_tensor_value_info(name, TensorProto.FLOAT, list(array.shape)) for name, array in inputs.items()
    ]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "product", values, [output], initializers)
    opsets = [helper.make_opsetid("", 20), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def sides(k: int, n: int, rng: np.random.Generator) -> tuple[dict[str, bytes], dict[str, np.ndarray], dict[str, float]]:
    """Each way of computing x [1, SEQ, k] @ w [k, n] as a model of one node (two: static), x, and
    the two per-channel sides' `exact_error`."""
    w = (rng.standard_normal((k, n)) * 0.05).astype(np.float32)
    per_channel = (np.abs(w).max(axis=0) / PRODUCT_MAX).astype(np.float32)
    per_channel_full = (np.abs(w).max(axis=0) / INT8_MAX).astype(np.float32)
    per_tensor = np.float32(np.abs(w).max() / INT8_MAX)
    x = {"x": rng.standard_normal((1, SEQ, k)).astype(np.float32)}

    def tensor(array, name):
        return numpy_helper.from_array(np.asarray(array), name)

    int8 = tensor(np.round(w / per_channel).astype(np.int8), "w")
    int8_full = tensor(np.round(w / per_channel_full).astype(np.int8), "w")
    int8_tensor = tensor(np.round(w / per_tensor).astype(np.int8), "w")
    uint8 = tensor((np.round(w / per_tensor) + 128).astype(np.uint8), "w")
    dynamic = "DynamicQuantizeMatMul"
    ms = "com.microsoft"
    static = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("MatMulIntegerToFloat", ["xq", "w", "xs", "ws", "xz"], ["y"], domain=ms),
    ]
    activation = [tensor(np.float32(ACTIVATION_SCALE), "xs"), tensor(np.uint8(128), "xz")]
    exact = {
        "int8, per channel (ours)": exact_error(x["x"][0], w, PRODUCT_MAX),
        "int8, per channel, full range": exact_error(x["x"][0], w, INT8_MAX),
    }
    return (
        {
            "float32 MatMul": product_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [tensor(w, "w")], x),
            "int8, per channel (ours)": product_model(
                [helper.make_node(dynamic, ["x", "w", "ws"], ["y"], domain=ms)], [int8, tensor(per_channel, "ws")], x
            ),
            "int8, per channel, full range": product_model(
                [helper.make_node(dynamic, ["x", "w", "ws"], ["y"], domain=ms)],
                [int8_full, tensor(per_channel_full, "ws")],
                x,
            ),
            "int8, per tensor": product_model(
                [helper.make_node(dynamic, ["x", "w", "ws"], ["y"], domain=ms)],
                [int8_tensor, tensor(per_tensor, "ws")],
                x,
            ),
            "uint8 weights, per tensor": product_model(
                [helper.make_node(dynamic, ["x", "w", "ws", "wz"], ["y"], domain=ms)],
                [uint8, tensor(per_tensor, "ws"), tensor(np.uint8(128), "wz")],
                x,
            ),
            "int8, per channel, static activation": product_model(
                static, [int8, tensor(per_channel, "ws"), *activation], x
            ),
        },
        x,
        exact,
    )


def torch_sides(x: np.ndarray, w: np.ndarray) -> dict:
    """torch's float32 Linear and its dynamic int8 Linear of x @ w, as callables of no argument."""
    import warnings

    import torch

    linear = torch.nn.Sequential(torch.nn.Linear(w.shape[0], w.shape[1], bias=False))
    with torch.no_grad():
        linear[0].weight.copy_(torch.from_numpy(w.T.copy()))
    with warnings.catch_warnings():  # torch.ao.quantization's deprecation (torchao is its successor)
        warnings.simplefilter("ignore")
        int8 = torch.ao.quantization.quantize_dynamic(linear, {torch.nn.Linear}, dtype=torch.qint8)
    rows = torch.from_numpy(x)

    def call(module):
        def run():
            with torch.inference_mode():
                return module(rows).numpy()

        return run

    return {"float32 Linear": call(linear), f"int8 dynamic Linear ({torch.backends.quantized.engine})": call(int8)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=["make-run", "base"], default="make-run")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=10, help="calls per round")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    import torch

    torch.set_num_threads(1)
    results, torch_results = {}, {}
    print(f"uint8 x int8 may saturate on this CPU (x86, no VNNI): {u8s8_saturates()}", flush=True)
    for k, n in SHAPES[args.preset]:
        models, x, exact = sides(k, n, rng)
        sessions = {
            name: onnxruntime.InferenceSession(m, options, providers=["CPUExecutionProvider"])
            for name, m in models.items()
        }
        reference = sessions["float32 MatMul"].run(None, x)[0]
        in_torch = torch_sides(x["x"][0], weight_of(models["float32 MatMul"]))
        calls = {name: functools.partial(s.run, None, x) for name, s in sessions.items()} | in_torch
        seconds: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                start = time.perf_counter()
                for _ in range(args.calls):
                    call()
                seconds[name].append((time.perf_counter() - start) / args.calls)
        fp32 = float(np.median(seconds["float32 MatMul"]))
        shape = f"[{SEQ} x {k}] x [{k} x {n}]"
        results[shape] = {
            name: {
                "us": float(np.median(s)) * 1e6,
                "speedup": fp32 / float(np.median(s)),
                "max_relative_error": float(
                    np.abs(sessions[name].run(None, x)[0] - reference).max() / np.abs(reference).max()
                ),
            }
            for name, s in seconds.items()
            if name in sessions
        }
        torch_fp32 = float(np.median(seconds["float32 Linear"]))
        torch_results[shape] = {
            name: {
                "us": float(np.median(seconds[name])) * 1e6,
                "speedup": torch_fp32 / float(np.median(seconds[name])),
                "max_relative_error": float(np.abs(call()[None] - reference).max() / np.abs(reference).max()),
            }
            for name, call in in_torch.items()
        }
        for name, error in exact.items():
            results[shape][name]["exact_sum_error"] = error
        print(f"{shape}", flush=True)
        for name, r in results[shape].items():
            exactly = f"  (sums exact: {r['exact_sum_error']:.1e})" if "exact_sum_error" in r else ""
            print(f"  {name:40s} {r['us']:9.1f} us  {r['speedup']:5.2f}x  error {r['max_relative_error']:.1e}{exactly}")
        for name, r in torch_results[shape].items():
            print(f"  torch: {name:33s} {r['us']:9.1f} us  {r['speedup']:5.2f}x  error {r['max_relative_error']:.1e}")
    result = {
        "preset": args.preset,
        "rounds": args.rounds,
        "u8s8_saturates": u8s8_saturates(),
        "load_average": os.getloadavg(),
        "products": results,
        "torch": torch_results,
    }
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
