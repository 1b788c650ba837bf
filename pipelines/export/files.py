"""Writing an ONNX model (onnx_ir) the way every export does: identical initializers stored once
(ALBERT's shared layer, traced once per application), and the file replaced only by a complete one."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import onnx_ir

# protobuf's 2 GiB limit on one message, less room for the graph itself: heavier weights go beside
# the file (OUTPUT.data); fp32 ALBERT-xxlarge (~0.9 GB) stays well under it.
INLINE_WEIGHTS_LIMIT = 2**31 - 2**26


def deduplicate_initializers(model: onnx_ir.Model) -> int:
    """Store initializers of identical dtype, shape and bytes once, rewiring their uses; the number
    removed. (onnx_ir's DeduplicateHashedInitializersPass fails on a transposed torch tensor, and its
    unhashed twin keeps a copy of every weight.)"""
    kept: dict[tuple, onnx_ir.Value] = {}
    removed = 0
    for value in list(model.graph.initializers.values()):
        tensor = value.const_value
        if tensor is None or value.is_graph_input() or value.is_graph_output():
            continue
        key = (tensor.dtype, tuple(tensor.shape), hashlib.sha256(tensor.tobytes()).digest())
        if key in kept:
            value.replace_all_uses_with(kept[key])
            model.graph.initializers.pop(value.name)
            removed += 1
        else:
            kept[key] = value
    return removed


def save_model(model: onnx_ir.Model, output: Path) -> int:
    """Write beside `output`, then rename: an existing file is replaced only by a complete one. The
    bytes written (with OUTPUT.data, where the weights are too heavy for one protobuf message)."""
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    data = output.with_name(output.name + ".data") if weights > INLINE_WEIGHTS_LIMIT else None
    partial = output.with_name(f".{output.name}.partial")
    try:
        onnx_ir.save(model, partial, external_data=None if data is None else data.name)
        os.replace(partial, output)
    finally:
        partial.unlink(missing_ok=True)
    return output.stat().st_size + (0 if data is None else data.stat().st_size)


__all__ = ["INLINE_WEIGHTS_LIMIT", "deduplicate_initializers", "save_model"]
