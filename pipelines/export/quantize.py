"""int8 weights for the ONNX export (`--quantize int8`), each of the shared layer's matrices
quantized and stored once, computed on onnxruntime's integer kernels.

onnxruntime's `quantize_dynamic` fails on this graph in both known ways (onnxruntime#10340: the
file grows; #11701: accuracy collapses). torch's exporter keeps a linear layer's weight as its
parameter [out, in] and computes the MatMul operand from it in the graph (a Transpose, q/k/v
concatenated), and the [CLS]-only last layer takes other slices of the same parameters. The
quantizer only quantizes a MatMul whose operand is itself an initializer: on this graph none of the
layer's, so nothing gets faster; folding the operands first makes it quantize every folded copy, so
the shared layer is stored twice (and, on an unrolled export, once per depth step: #10340); and
without `MatMulConstBOnly` it also quantizes the attention's activation x activation MatMuls, which
is what loses the accuracy.

So here, in one pass over the graph:
- each parameter matrix feeding a MatMul (through Transpose and Concat only) is quantized once, per
  output channel, symmetric int8 of 7 bits (scale = max |w| / 63 per channel: `PRODUCT_MAX`, which
  keeps onnxruntime's int8 kernel from saturating on CPUs without VNNI: inference/int8_cpu.py), and
  replaces the fp32 parameter; the graph's Transpose/Concat nodes are kept, applied to the int8
  tensor (onnxruntime folds them when it loads the file, in memory); each MatMul gets its operand's
  per-channel scales (a few floats each) and becomes DynamicQuantizeLinear (the activation, uint8
  per tensor, at run time) -> MatMulInteger -> Cast -> Mul by the two scales, which onnxruntime
  fuses into its DynamicQuantizeMatMul kernel;
- each embedding table read by Gather is stored as int8 rows (the full 127) with a scale per row
  (the table is most of a small model's bytes), multiplied back to float32 when onnxruntime loads
  the file;
- the pooler's Gemm becomes a MatMul and an Add, quantized as the layer's are;
- what stays float32: LayerNorm, softmax, the attention's activation x activation MatMuls, the
  biases, and a Gemm whose output is the model's (the classifier: small, and where the task's
  decision is made).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ..inference.int8_cpu import PRODUCT_MAX, WEIGHT_OPS

INT8_MAX = 127
"""An embedding table's range: its rows are multiplied back to float32, never by an integer kernel."""


@dataclass(frozen=True)
class Quantized:
    """What `quantize_int8` changed."""

    matmuls: int
    """MatMuls now computed in int8."""
    tables: int
    """Embedding tables now int8."""
    matrices: int
    """Parameter matrices quantized, each stored once (however many MatMuls read it)."""


def quantize_int8(model: ir.Model, product_max: int = PRODUCT_MAX) -> Quantized:
    """Quantize `model`'s weight MatMuls and embedding tables in place (the module docstring);
    `product_max` the MatMul weights' range (127: full-range weights, bench/onnx_int8.py's contrast)."""
    graph = model.graph
    for node in [n for n in graph if n.op_type == "Gemm" and not n.outputs[0].is_graph_output()]:
        _gemm_as_matmul(graph, node)
    plans = [(node, _operand_leaves(node.inputs[1])) for node in list(graph) if node.op_type == "MatMul"]
    plans = [(node, leaves) for node, leaves in plans if leaves]
    axes: dict[str, int] = {}
    for _, leaves in plans:
        for leaf, axis in leaves.items():
            if axes.setdefault(leaf.name, axis) != axis:
                raise ValueError(f"{leaf.name} feeds MatMuls along two axes; int8 quantization expects one")
    leaves = {leaf.name: leaf for _, found in plans for leaf in found}
    scales = {name: _quantize_initializer(graph, leaves[name], axes[name], product_max) for name in leaves}
    for node, _ in plans:
        _retype_int8(node.inputs[1])
        _integer_matmul(graph, node, scales)
    tables = {
        node.inputs[0].name: node.inputs[0]
        for node in graph
        if node.op_type == "Gather"
        and node.inputs[0].is_initializer()
        and node.inputs[0].const_value is not None
        and node.inputs[0].const_value.dtype == ir.DataType.FLOAT
        and len(node.inputs[0].shape) == 2
        and all(u.node.op_type == "Gather" and u.node.attributes.get_int("axis", 0) == 0 for u in node.inputs[0].uses())
    }
    for table in tables.values():
        _integer_table(graph, table)
    return Quantized(matmuls=len(plans), tables=len(tables), matrices=len(leaves))


def _gemm_as_matmul(graph: ir.Graph, node: ir.Node) -> None:
    """Gemm(A, B, C) of a float parameter B, alpha = beta = 1, as MatMul(A, B or its Transpose) + C, so
    that the MatMul is quantized as the others are (the pooler)."""
    attributes = node.attributes
    if attributes.get_float("alpha", 1.0) != 1.0 or attributes.get_float("beta", 1.0) != 1.0:
        return
    if attributes.get_int("transA", 0) or not node.inputs[1].is_initializer():
        return
    name = node.name or node.outputs[0].name
    operand, added = node.inputs[1], []
    if attributes.get_int("transB", 0):
        added.append(ir.Node("", "Transpose", [operand], [ir.AttrInt64s("perm", [1, 0])], name=f"{name}_transpose"))
        operand = added[-1].outputs[0]
    added.append(ir.Node("", "MatMul", [node.inputs[0], operand], name=f"{name}_matmul"))
    if len(node.inputs) > 2 and node.inputs[2] is not None:
        added.append(ir.Node("", "Add", [added[-1].outputs[0], node.inputs[2]], name=f"{name}_bias"))
    graph.insert_before(node, added)
    node.outputs[0].replace_all_uses_with(added[-1].outputs[0])
    graph.remove(node, safe=True)


def _operand_leaves(value: ir.Value) -> dict[ir.Value, int]:
    """The float parameter matrices a MatMul operand [K, N] is made of, each with the axis that holds
    its output channels; {} where the operand is not such a weight (an activation, another op)."""
    leaves: dict[ir.Value, int] = {}

    def walk(v: ir.Value, axis: int) -> bool:
        if not all(use.node.op_type in WEIGHT_OPS or (use.node.op_type, use.idx) == ("MatMul", 1) for use in v.uses()):
            return False  # read elsewhere as a float too (a tied weight): left float
        if v.is_initializer():
            tensor = v.const_value
            if tensor is None or tensor.dtype != ir.DataType.FLOAT or len(tensor.shape) != 2:
                return False
            return leaves.setdefault(v, axis) == axis
        node = v.producer()
        if node is None or node.op_type not in WEIGHT_OPS:
            return False
        if node.op_type == "Transpose":
            perm = node.attributes.get_ints("perm", None) or [1, 0]
            return walk(node.inputs[0], perm[axis])
        if node.attributes.get_int("axis") % 2 != axis:  # Concat along another axis mixes channels
            return False
        return all(walk(i, axis) for i in node.inputs)

    return leaves if walk(value, 1) else {}


def _quantize_initializer(graph: ir.Graph, value: ir.Value, axis: int, largest: int) -> np.ndarray:
    """Replace the float initializer `value` by its int8 per-channel (`axis`) quantization in
    [-largest, largest] under the same name; returns its scales, shaped to broadcast over it."""
    weights = value.const_value.numpy()
    scale = np.abs(weights).max(axis=1 - axis, keepdims=True) / largest
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    value.const_value = ir.tensor(np.round(weights / scale).astype(np.int8), name=value.name)
    value.dtype = ir.DataType.INT8
    return np.broadcast_to(scale, weights.shape)


def _retype_int8(value: ir.Value) -> None:
    """Declare the Transpose/Concat outputs between int8 parameters and a MatMul int8 too."""
    node = value.producer()
    if node is not None:
        value.dtype = ir.DataType.INT8
        for i in node.inputs:
            _retype_int8(i)


def _operand_scale(value: ir.Value, scales: dict[str, np.ndarray]) -> np.ndarray:
    """The MatMul operand's scale per output column: its Transpose/Concat applied to the leaves'
    broadcast scales, one row of the result."""

    def evaluate(v: ir.Value) -> np.ndarray:
        if v.is_initializer():
            return scales[v.name]
        node = v.producer()
        if node.op_type == "Transpose":
            return np.transpose(evaluate(node.inputs[0]), node.attributes.get_ints("perm", None))
        return np.concatenate([evaluate(i) for i in node.inputs], axis=node.attributes.get_int("axis"))

    return np.ascontiguousarray(evaluate(value)[0])


def _integer_matmul(graph: ir.Graph, node: ir.Node, scales: dict[str, np.ndarray]) -> None:
    """MatMul(A, W) -> DynamicQuantizeLinear(A) -> MatMulInteger -> Cast -> Mul by both scales."""
    name = node.name or node.outputs[0].name
    activation, operand = node.inputs
    if node.outputs[0].is_graph_output():
        raise ValueError(f"{name}: a MatMul that is a graph output")
    weight_scale = ir.Value(name=f"{name}_weight_scale", const_value=ir.tensor(_operand_scale(operand, scales)))
    graph.register_initializer(weight_scale)
    quantize = ir.Node("", "DynamicQuantizeLinear", [activation], num_outputs=3, name=f"{name}_quantize")
    quantized, activation_scale, zero_point = quantize.outputs
    integer = ir.Node("", "MatMulInteger", [quantized, operand, zero_point], name=f"{name}_integer")
    cast = ir.Node("", "Cast", integer.outputs, [ir.AttrInt64("to", ir.DataType.FLOAT)], name=f"{name}_cast")
    both = ir.Node("", "Mul", [activation_scale, weight_scale], name=f"{name}_scales")
    scaled = ir.Node("", "Mul", [cast.outputs[0], both.outputs[0]], name=f"{name}_scaled")
    graph.insert_before(node, [quantize, integer, cast, both, scaled])
    node.outputs[0].replace_all_uses_with(scaled.outputs[0])
    graph.remove(node, safe=True)


def _integer_table(graph: ir.Graph, table: ir.Value) -> None:
    """Gather(table, ids) -> Gather(Cast(int8 table) * row scales, ids), for each Gather of `table`:
    the product reads only initializers, so onnxruntime computes it once when it loads the file, and
    lookups stay float32 gathers (the file holds int8; memory, the float table)."""
    readers = [use.node for use in table.uses()]
    first = next(node for node in graph if node in readers)
    scale = _quantize_initializer(graph, table, 0, INT8_MAX)[:, :1]  # [V, 1]: a row's scale, for its elements
    row_scales = ir.Value(name=f"{table.name}.scale", const_value=ir.tensor(np.ascontiguousarray(scale)))
    graph.register_initializer(row_scales)
    cast = ir.Node("", "Cast", [table], [ir.AttrInt64("to", ir.DataType.FLOAT)], name=f"{table.name}_cast")
    scaled = ir.Node("", "Mul", [cast.outputs[0], row_scales], name=f"{table.name}_dequantized")
    graph.insert_before(first, [cast, scaled])
    for node in readers:
        node.replace_input_with(0, scaled.outputs[0])


__all__ = ["Quantized", "quantize_int8"]
