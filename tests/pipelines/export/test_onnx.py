"""The ONNX export (pipelines/export/onnx.py): a shared ALBERT of 4 layers (applications of its one
layer) of each exported architecture as one file no larger than 1.1x its model.safetensors (the
shared layer's weights stored once, not once per application: ~4x if they were), named inputs and
outputs with dynamic axes, outputs within 1e-4 of PyTorch on onnxruntime's CPU provider at two
shapes with padding; identical copies stored once; weights too heavy for one protobuf message
beside the file. The command: test_export_command.py."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import numpy_helper
from safetensors.numpy import load_file

from albert_model import (
    AlbertConfig,
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
)
from albert_model.hf import save_hf_pretrained
from pipelines.export.onnx import check_inputs, export_onnx, fuse_export, load_exportable, max_abs_difference
from pipelines.storage.models import RECORD

LAYERS = 4  # 12 says no more, and each application costs the exporter's tracing and optimising time
CONFIG = AlbertConfig.from_preset("tiny", vocab_size=1000).replace(num_hidden_layers=LAYERS, num_labels=3)
LAYER = "albert.encoder.albert_layer_groups.0.albert_layers.0."
LABELS = ["sport", "politics", "business"]
SHAPES = ((3, 17), (2, 40))  # (batch, sequence); the export traced (2, 8)
HEADS = {
    "AlbertForSequenceClassification": (AlbertForSequenceClassification, ("logits",)),
    "AlbertForPreTraining": (AlbertForPreTraining, ("last_hidden_state", "pooler_output")),
    "AlbertForQuestionAnswering": (AlbertForQuestionAnswering, ("start_logits", "end_logits")),
    "AlbertForMultipleChoice": (AlbertForMultipleChoice, ("logits",)),
}


def save(root: Path, model_class, config: AlbertConfig = CONFIG, **kwargs) -> Path:
    torch.manual_seed(0)
    return save_hf_pretrained(model_class(config), root / model_class.__name__, **kwargs)


def layer_matrices(folder: Path) -> dict[str, np.ndarray]:
    """The shared layer's weight matrices (q, k, v, attention output, FFN in and out)."""
    return {k: v for k, v in load_file(str(folder / "model.safetensors")).items() if LAYER in k and v.ndim == 2}


def copies(model: onnx.ModelProto, matrix: np.ndarray) -> int:
    """Initializers holding `matrix` (or its transpose, as constant folding may store it)."""
    return sum(
        any(a.shape == m.shape and np.array_equal(a, m) for m in (matrix, matrix.T))
        for a in (numpy_helper.to_array(t) for t in model.graph.initializer)
    )


@pytest.fixture(scope="module", params=list(HEADS))
def exported(request, tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    model_class, _ = HEADS[request.param]
    kwargs = {}
    if model_class is AlbertForSequenceClassification:  # multi-label, with a fine-tuned export's record
        record = {"task": "multi_label", "max_seq_length": 64}
        labels = dict(enumerate(LABELS))
        kwargs = {"problem_type": "multi_label_classification", "id2label": labels, "extra_config": {RECORD: record}}
    folder = save(root, model_class, **kwargs)
    exportable = load_exportable(folder)
    return folder, exportable, export_onnx(exportable, root / "model.onnx")


def test_the_file_carries_how_the_folder_says_the_model_is_applied(exported):
    """Issue #44: the record of its fine-tuning, its labels and problem type, as config.json holds
    them, are the ONNX file's metadata (onnxruntime's custom_metadata_map), so a runtime holding only
    the file applies the model as the folder says; keys the folder lacks stay out."""
    folder, _, done = exported
    config = json.loads((folder / "config.json").read_text())
    metadata = onnxruntime.InferenceSession(str(done.path)).get_modelmeta().custom_metadata_map
    assert {key: json.loads(value) for key, value in metadata.items()} == {
        key: config[key] for key in (RECORD, "id2label", "problem_type") if key in config
    }
    assert (RECORD in metadata) == (config["architectures"] == ["AlbertForSequenceClassification"])


def test_the_shared_layer_is_stored_once(exported):
    folder, _, done = exported
    assert done.onnx_bytes == done.path.stat().st_size
    assert done.weights_bytes == (folder / "model.safetensors").stat().st_size
    assert done.ratio <= 1.1, (done.onnx_bytes, done.weights_bytes)
    model = onnx.load(str(done.path))
    matrices = layer_matrices(folder)
    assert len(matrices) == 6
    # unrolled, each would be there once per application (the file ~3x the weights)
    assert {name: copies(model, m) for name, m in matrices.items()} == dict.fromkeys(matrices, 1)


def test_inputs_and_outputs_are_named_with_dynamic_axes(exported):
    _, exportable, done = exported
    graph = onnx.load(str(done.path)).graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    for value in graph.input:
        assert value.type.tensor_type.elem_type == onnx.TensorProto.INT64
        dims = value.type.tensor_type.shape.dim
        assert all(d.dim_param and not d.dim_value for d in dims), dims  # every axis dynamic
    assert tuple(o.name for o in graph.output) == HEADS[exportable.architecture][1]


def test_onnxruntime_agrees_with_pytorch_at_two_shapes(exported):
    _, exportable, done = exported
    assert max_abs_difference(exportable, done.path, SHAPES) < 1e-4
    session = onnxruntime.InferenceSession(str(done.path), providers=["CPUExecutionProvider"])
    choices = 4 if exportable.architecture == "AlbertForMultipleChoice" else None
    inputs = check_inputs(exportable.config, *SHAPES[0], choices=choices)
    assert (inputs["attention_mask"] == 0).any()  # padding is part of what agrees
    first = session.run(None, inputs)[0]
    expected = {
        "AlbertForSequenceClassification": (3, 3),  # multi-label: the logits, one per label
        "AlbertForPreTraining": (3, 17, 128),
        "AlbertForQuestionAnswering": (3, 17),
        "AlbertForMultipleChoice": (3, 4),
    }
    assert first.shape == expected[exportable.architecture]


@pytest.mark.e2e  # a fusion of each head's export, ~2 s a head: make test-e2e
def test_every_head_s_attention_fused_export_agrees_with_pytorch(exported, tmp_path):
    """--fuse-attention (pipelines/export/fuse.py): each depth step's attention, the [CLS]-only last
    one and the multiple-choice rows included, one MultiHeadAttention, within 1e-4 of PyTorch at two
    shapes with padding. The fp32 and int8 files' weights: test_quantize.py."""
    _, exportable, done = exported
    assert fuse_export(done.path, tmp_path / "fused.onnx") == LAYERS
    assert max_abs_difference(exportable, tmp_path / "fused.onnx", SHAPES) < 1e-4


def test_identical_layers_are_stored_once_even_unshared(tmp_path):
    """A model whose 4 layers hold equal copies (sharing "none"), as an unrolled export would: the
    initializers of identical bytes are stored once, so the file is about the shared weights' size,
    not ~3x. (Unshared, each layer's weights feed one step, so constant folding stores some
    transposed; the last layer's query, which it reads alone, is then there twice: 1.1x, not 1.05x.)"""
    shared = save(tmp_path / "shared", AlbertForSequenceClassification)
    model = AlbertForSequenceClassification(CONFIG.replace(sharing="none"))
    model.load_state_dict(_unrolled_state(shared))
    unrolled = save_hf_pretrained(model, tmp_path / "unrolled")
    shared_bytes = (shared / "model.safetensors").stat().st_size
    assert (unrolled / "model.safetensors").stat().st_size > 2.5 * shared_bytes
    exportable = load_exportable(unrolled)
    done = export_onnx(exportable, tmp_path / "unrolled.onnx")
    assert done.duplicates_removed > (LAYERS - 1) * 4
    assert done.onnx_bytes < 1.2 * shared_bytes
    assert max_abs_difference(exportable, done.path, SHAPES[:1]) < 1e-4


def _unrolled_state(shared: Path) -> dict[str, torch.Tensor]:
    state = {k: torch.from_numpy(v) for k, v in load_file(str(shared / "model.safetensors")).items()}
    out = {k: v for k, v in state.items() if LAYER not in k}
    for k, v in state.items():
        if LAYER in k:
            out.update({k.replace("_groups.0.", f"_groups.{g}."): v.clone() for g in range(LAYERS)})
    return out


def test_weights_over_the_protobuf_limit_go_beside_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr("pipelines.export.files.INLINE_WEIGHTS_LIMIT", 0)
    exportable = load_exportable(save(tmp_path, AlbertForQuestionAnswering, CONFIG.replace(num_hidden_layers=2)))
    done = export_onnx(exportable, tmp_path / "qa.onnx")
    data = tmp_path / "qa.onnx.data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["AlbertForQuestionAnswering", "qa.onnx", "qa.onnx.data"]
    assert done.path.stat().st_size < 0.1 * data.stat().st_size
    assert done.onnx_bytes == done.path.stat().st_size + data.stat().st_size
    assert max_abs_difference(exportable, done.path, SHAPES[:1]) < 1e-4
