"""`albert-ray export onnx --quantize int8` (pipelines/export/quantize.py) on a 4-layer shared
classifier: the file at most 0.35x the fp32 export's; each of the shared layer's matrices stored
once, as int8 (its per-channel quantization, no float copy left); the weight MatMuls computed by
MatMulInteger and the attention's activation x activation MatMuls left float; the same usage
metadata as fp32; predictions agreeing with PyTorch's; with --fuse-attention, fp32 and int8 alike,
each attention onnxruntime's MultiHeadAttention, the same answers, the weights still once; the
command's lines (e2e: more exports).
Agreement on a fine-tuned model's eval rows: tests/pipelines/test_family_paths.py."""

import json
import os
import re
from types import SimpleNamespace

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import numpy_helper

from albert_model import AlbertConfig, AlbertForSequenceClassification
from albert_model.hf import save_hf_pretrained
from pipelines.cli.command import main
from pipelines.export.onnx import (
    export_onnx,
    fuse_export,
    load_exportable,
    max_abs_difference,
    prediction_agreement,
    quantize_export,
)
from pipelines.storage.models import RECORD

from .test_onnx import LAYERS, copies, layer_matrices

CONFIG = AlbertConfig.from_preset("tiny", vocab_size=1000).replace(num_hidden_layers=4, num_labels=3)


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A classifier folder recording its fine-tuning, exported fp32 and int8 (from the fp32 file, as
    the command's `--quantize int8` does from the trace: one export's time)."""
    root = tmp_path_factory.mktemp("int8")
    torch.manual_seed(0)
    record = {RECORD: {"task": "classification", "max_seq_length": 32}}
    labels = {0: "a", 1: "b", 2: "c"}
    folder = save_hf_pretrained(
        AlbertForSequenceClassification(CONFIG), root / "model", id2label=labels, extra_config=record
    )
    exportable = load_exportable(folder)
    fp32 = export_onnx(exportable, root / "model.onnx")
    quantized = quantize_export(fp32.path, root / "model.int8.onnx")
    path = root / "model.int8.onnx"
    return folder, exportable, fp32, SimpleNamespace(path=path, onnx_bytes=path.stat().st_size, quantized=quantized)


def int8_copy(matrix: np.ndarray, axis: int) -> np.ndarray:
    """`matrix` quantized per channel along `axis` as the export does a MatMul's weight: symmetric,
    7 bits (max |w| / 63)."""
    scale = np.abs(matrix).max(axis=1 - axis, keepdims=True) / 63
    return np.round(matrix / scale).astype(np.int8)


def test_the_int8_file_is_a_third_of_fp32_with_the_shared_layer_once(exports):
    folder, _, fp32, int8 = exports
    assert int8.onnx_bytes <= 0.35 * fp32.onnx_bytes, (int8.onnx_bytes, fp32.onnx_bytes)
    initializers = [numpy_helper.to_array(t) for t in onnx.load(str(int8.path)).graph.initializer]
    matrices = layer_matrices(folder)
    assert len(matrices) == 6
    for name, matrix in matrices.items():
        quantized = int8_copy(matrix, 0)  # [out, in]: a channel is a row
        same = [a for a in initializers if a.dtype == np.int8 and a.shape == matrix.shape]
        assert sum(np.array_equal(a, quantized) for a in same) == 1, name
        floats = [a for a in initializers if a.dtype == np.float32 and a.size == matrix.size]
        assert not any(np.array_equal(a.reshape(matrix.shape), matrix) for a in floats), name
        assert not any(a.shape == matrix.T.shape and np.array_equal(a, matrix.T) for a in floats), name
    assert int8.quantized.matrices == 6 + 2  # the layer's, the embedding mapping's, the pooler's


def test_product_weights_are_7_bit_and_tables_8_bit(exports):
    """Every channel of a MatMulInteger weight reaches 63 and none passes it (two uint8 x int8 products
    fit the int16 of a CPU without VNNI: 2 x 255 x 63 < 32,768); an embedding table's rows, which no
    integer kernel multiplies, use the full 127."""
    _, _, _, int8 = exports
    model = onnx.load(str(int8.path))
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    tables = {name for name in arrays if f"{name}.scale" in arrays}
    assert len(tables) == int8.quantized.tables == 3
    for name in tables:
        assert arrays[name].dtype == np.int8 and np.abs(arrays[name].astype(int)).max(axis=1).min() == 127, name
    products = [a for name, a in arrays.items() if a.dtype == np.int8 and name not in tables]
    assert len(products) == int8.quantized.matrices
    for a in products:
        per_row, per_column = (np.abs(a.astype(int)).max(axis=axis) for axis in (1, 0))
        assert a.max() <= 63 and a.min() >= -63 and (set(per_row) == {63} or set(per_column) == {63})


def test_weight_matmuls_are_integer_and_attention_stays_float(exports):
    _, _, fp32, int8 = exports
    ops = [n.op_type for n in onnx.load(str(int8.path)).graph.node]
    fp32_matmuls = [n.op_type for n in onnx.load(str(fp32.path)).graph.node].count("MatMul")
    # per application: q/k/v fused, the attention's output, the FFN's two; with the embedding mapping
    # and the pooler (the last layer runs at [CLS] only, with q and k/v apart)
    assert ops.count("MatMulInteger") == int8.quantized.matmuls == 4 * 4 + 1 + 1 + 1
    assert ops.count("DynamicQuantizeLinear") == int8.quantized.matmuls
    assert ops.count("MatMul") == 2 * 4  # q.k and the attention's weighted sum, at each depth step
    assert fp32_matmuls == ops.count("MatMul") + int8.quantized.matmuls - 1  # the pooler was a Gemm
    assert ops.count("Gemm") == 1  # the classifier, float


def test_the_int8_file_carries_the_same_usage_and_agrees_with_pytorch(exports):
    _, exportable, fp32, int8 = exports

    def metadata(path):
        return onnxruntime.InferenceSession(str(path)).get_modelmeta().custom_metadata_map

    assert metadata(int8.path) == metadata(fp32.path) and json.loads(metadata(int8.path)[RECORD])["task"]
    assert prediction_agreement(exportable, int8.path) >= 0.95
    assert prediction_agreement(exportable, fp32.path) == 1.0


def test_fused_attention_answers_the_same_with_the_weights_once(exports, tmp_path):
    """--fuse-attention on the fp32 and the int8 export: a MultiHeadAttention a depth step (the
    [CLS]-only last one too) and no Softmax left; fp32 within 1e-4 of PyTorch at two shapes with
    padding; the shared layer's matrices stored once in both, the usage kept (the fused int8 file's
    agreement with PyTorch: the command's test below, e2e)."""
    folder, exportable, fp32, int8 = exports
    fused = {"fp32": tmp_path / "fp32.fused.onnx", "int8": tmp_path / "int8.fused.onnx"}
    assert fuse_export(fp32.path, fused["fp32"]) == fuse_export(int8.path, fused["int8"]) == LAYERS
    for path in fused.values():
        ops = [n.op_type for n in onnx.load(str(path)).graph.node]
        assert ops.count("MultiHeadAttention") == LAYERS and "Softmax" not in ops
        assert onnxruntime.InferenceSession(str(path)).get_modelmeta().custom_metadata_map[RECORD]
    assert max_abs_difference(exportable, fused["fp32"]) < 1e-4
    matrices = layer_matrices(folder)
    model = onnx.load(str(fused["fp32"]))
    assert {name: copies(model, m) for name, m in matrices.items()} == dict.fromkeys(matrices, 1)
    model = onnx.load(str(fused["int8"]))  # as int8, as themselves or transposed (constant folding)
    assert {name: copies(model, int8_copy(m, 0)) for name, m in matrices.items()} == dict.fromkeys(matrices, 1)
    assert os.path.getsize(fused["int8"]) <= 0.35 * fp32.onnx_bytes


def weights(path) -> list[tuple]:
    """A file's initializers as (type, shape, bytes), sorted."""
    return sorted(
        (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()) for t in onnx.load(str(path)).graph.initializer
    )


def test_a_full_range_file_is_found_and_warned_of_by_name(exports, tmp_path, caplog):
    """An int8 file whose MatMul weights use all 8 bits (as exports were before 7-bit weights): its
    weights are found, and reading it for predict or serve warns once, naming the setting and the
    file, whether this CPU saturates on it; the product's own int8 file and fp32 get no warning."""
    import json

    from pipelines.inference.int8_cpu import full_range_products, u8s8_saturates
    from pipelines.inference.onnx_runner import read_onnx

    folder, _, fp32, int8 = exports
    full = tmp_path / "full.onnx"
    quantize_export(fp32.path, full, product_max=127)
    assert len(full_range_products(onnx.load(str(full)))) == int8.quantized.matrices
    assert full_range_products(onnx.load(str(int8.path))) == full_range_products(onnx.load(str(fp32.path))) == []
    config = json.loads((folder / "config.json").read_text())
    for path in (full, int8.path, fp32.path):
        caplog.clear()
        read_onnx(str(path), "predict.onnx", config, ("logits",), str(folder))
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        if path == full:
            assert len(warned) == 1 and warned[0].startswith(f"predict.onnx {full}: 8 int8 weight matrices")
            assert f"(this one: {'yes' if u8s8_saturates() else 'no'})" in warned[0] and "--quantize int8" in warned[0]
        else:
            assert warned == []


def test_which_cpus_saturate(tmp_path):
    """x86 without avx512_vnni or avx_vnni in /proc/cpuinfo's flags saturates; with either, or on ARM,
    it does not; an x86 machine whose cpuinfo cannot be read counts as saturating."""
    from pipelines.inference.int8_cpu import u8s8_saturates

    def cpuinfo(flags: str) -> str:
        path = tmp_path / f"cpuinfo-{len(flags)}"
        path.write_text(f"processor\t: 0\nmodel name\t: x\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
        return str(path)

    assert u8s8_saturates("x86_64", cpuinfo("fpu sse avx avx2 fma"))
    assert u8s8_saturates("x86_64", cpuinfo("fpu avx2 avx512f avx512bw"))  # Skylake-SP: AVX-512, no VNNI
    assert not u8s8_saturates("x86_64", cpuinfo("avx2 avx512f avx512_vnni"))
    assert not u8s8_saturates("AMD64", cpuinfo("avx2 avx_vnni"))
    assert not u8s8_saturates("aarch64", str(tmp_path / "none"))
    assert u8s8_saturates("x86_64", str(tmp_path / "none"))


@pytest.mark.e2e
def test_the_command_quantizes_and_says_the_agreement(exports, tmp_path, capsys):
    folder = exports[0]
    output = tmp_path / "model.int8.onnx"
    assert main(["export", "onnx", str(folder), str(output), "--quantize", "int8"]) == 0
    out = capsys.readouterr().out
    assert "int8: 8 matrices, 3 tables)" in out and "max abs difference" not in out
    agreement = float(re.search(r"predictions agreeing with PyTorch \(onnxruntime CPU, int8\): (\S+)%", out).group(1))
    assert 95 <= agreement <= 100
    assert weights(output) == weights(exports[3].path)  # as quantized from the fp32 file
    with pytest.raises(SystemExit, match="2"):
        main(["export", "onnx", str(folder), str(tmp_path / "x.onnx"), "--quantize", "int4"])
    assert "invalid choice: 'int4'" in capsys.readouterr().err


@pytest.mark.e2e
def test_the_command_fuses_the_attention_of_an_int8_export(exports, tmp_path, capsys):
    output = tmp_path / "model.int8.fused.onnx"
    assert main(["export", "onnx", str(exports[0]), str(output), "--quantize", "int8", "--fuse-attention"]) == 0
    out = capsys.readouterr().out
    assert f"int8: 8 matrices, 3 tables, {LAYERS} MultiHeadAttention)" in out
    assert re.search(r"predictions agreeing with PyTorch \(onnxruntime CPU, int8\): (9[5-9]|100)", out)
