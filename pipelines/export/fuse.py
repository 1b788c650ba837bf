"""`--fuse-attention`: each attention of an export (fp32 or int8) as onnxruntime's own
MultiHeadAttention op, ~10% faster in onnxruntime on CPU (docs/model.md#int8), and a file that only
onnxruntime loads (com.microsoft ops), which is why the export leaves it off by default.

onnxruntime's BERT optimizer finds no attention in this graph (its patterns are BERT's as the
TorchScript exporter wrote it); onnxscript's ORT fusions, written for torch's dynamo exports, do:
scaled dot-product attention, then MultiHeadAttention, for the full layer and the [CLS]-only last one.
The attention's alone: onnxscript's `optimize_for_ort` would also write SkipLayerNormalization into
the file, the kernel the product's sessions leave out (onnx_runner.SLOWER_FUSIONS).
"""

from __future__ import annotations

import onnx_ir
import onnx_ir.passes.common as common_passes
from onnxscript.optimizer import optimize
from onnxscript.rewriter.ort_fusions import shape_optimization
from onnxscript.rewriter.ort_fusions.mha import fuse_mha1, fuse_mha2
from onnxscript.rewriter.ort_fusions.sdpa import fuse_sdpa
from onnxscript.rewriter.ort_fusions.sdpa_via_mha import replace_sdpa_by_mha


def fuse_attention(model: onnx_ir.Model) -> int:
    """Rewrite `model`'s attentions as MultiHeadAttention in place; how many there are now."""
    # What onnxscript's fuse_xformers does first: the patterns match on folded constants and shapes.
    common_passes.ShapeInferencePass()(model)
    optimize(model)
    shape_optimization.rules.apply_to_model(model)
    optimize(model)
    fuse_sdpa(model, apply_shape_inference=True)
    fuse_mha1(model)
    fuse_mha2(model)
    replace_sdpa_by_mha(model)
    optimize(model)
    return sum(node.op_type == "MultiHeadAttention" for node in model.graph)


__all__ = ["fuse_attention"]
