"""The int8 weights' range that no CPU saturates, and the check of an int8 export predict and serve read.

An int8 export (`albert-ray export onnx --quantize int8`, pipelines/export/quantize.py) multiplies
uint8 activations by int8 weights in onnxruntime's integer kernels. On an x86 CPU without VNNI (AVX2,
AVX-512 before Intel's Cascade Lake, AMD before Zen 4) the kernel is `vpmaddubsw`, which adds two
such products into an int16 and saturates at 32,767: 2 x 255 x 127 does not fit, 2 x 255 x 63 =
32,130 does. So the export's weights are 7-bit (PRODUCT_MAX), and predict and serve warn of a file
whose weights use all 8 bits (an export written before, or another tool's) when they read it."""

from __future__ import annotations

import logging
import platform

import numpy as np
import onnx
from onnx import numpy_helper

log = logging.getLogger(__name__)

PRODUCT_MAX = 63
"""An integer MatMul's weight range, 7 bits of int8's 8 (the module docstring). Full-range weights
moved a weight product by up to 18% of its largest value and changed 2.5% of make run's predictions
on an AMD EPYC; 7-bit ones equal exact integer sums there, at the same kernel's speed (onnxruntime's
`reduce_range`, OpenVINO's workaround; docs/BENCHMARKS.md#int8-on-cpu)."""
INTEGER_PRODUCTS = ("MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat")
"""onnxruntime's ops that multiply uint8 activations by an int8 weight (their second input)."""
WEIGHT_OPS = ("Transpose", "Concat")
"""The ops between a parameter and a MatMul operand that keep each output channel one parameter row
(the exporter's transposes and the fused q/k/v concatenation)."""


def u8s8_saturates(machine: str | None = None, cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether onnxruntime's uint8 x int8 kernel may saturate on this CPU (`machine`: platform's
    name of it by default): x86 without VNNI (neither avx512_vnni nor avx_vnni in `cpuinfo`'s flags;
    an x86 machine without that file counts as without). ARM's dot products sum in 32 bits."""
    if (machine or platform.machine()).lower() not in ("x86_64", "amd64", "i386", "i686", "x86"):
        return False
    try:
        with open(cpuinfo) as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return True
    return not {"avx512_vnni", "avx_vnni"} & set(flags)


def full_range_products(model: onnx.ModelProto) -> list[str]:
    """The int8 weight initializers of `model`'s integer MatMuls (through Transpose and Concat) with
    a value beyond PRODUCT_MAX, by name; each read once, however many MatMuls share it."""
    initializers = {t.name: t for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}

    def leaves(name: str) -> list[str]:
        if name in initializers:
            return [name]
        node = producers.get(name)
        return [leaf for i in node.input for leaf in leaves(i)] if node and node.op_type in WEIGHT_OPS else []

    weights = dict.fromkeys(
        leaf
        for node in model.graph.node
        if node.op_type in INTEGER_PRODUCTS and len(node.input) > 1
        for leaf in leaves(node.input[1])
    )
    return [
        name
        for name in weights
        if initializers[name].data_type == onnx.TensorProto.INT8
        and np.abs(numpy_helper.to_array(initializers[name]).astype(np.int16)).max(initial=0) > PRODUCT_MAX
    ]


def warn_if_full_range(model: onnx.ModelProto, where: str) -> bool:
    """Log a warning naming `where` (the setting and the file) when `model` has integer MatMul
    weights beyond 7 bits, which this CPU's int8 kernel, or another x86 CPU's without VNNI,
    saturates (some answers then differ from the model's); whether it warned."""
    weights = full_range_products(model)
    if weights:
        log.warning(
            "%s: %d int8 weight matrices of its MatMuls use all 8 bits, which onnxruntime's int8 kernel "
            "saturates on an x86 CPU without VNNI (this one: %s), where some answers then differ from the "
            "model's; export it again (`albert-ray export onnx MODEL_DIR FILE --quantize int8` writes 7-bit "
            "weights: docs/model.md#int8)",
            where,
            len(weights),
            "yes" if u8s8_saturates() else "no",
        )
    return bool(weights)


__all__ = [
    "INTEGER_PRODUCTS",
    "PRODUCT_MAX",
    "WEIGHT_OPS",
    "full_range_products",
    "u8s8_saturates",
    "warn_if_full_range",
]
