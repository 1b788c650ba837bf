"""A transformers-format ALBERT folder as one ONNX file whose shared layer's weights are stored once,
and the check that onnxruntime computes what PyTorch does.

ALBERT applies one layer's weights at every depth step; an export that unrolls the loop into copies
stores them once per application (~7x the weights, transformers issue #8869). torch's dynamo exporter
(`torch.onnx.export(dynamo=True)`) makes each parameter one initializer however often the graph
reads it. What grows with depth is the graph: each node's debugging metadata (as large as the tiny
model's weights; stripped below) and the values constant folding precomputes at each step (the fused
q/k/v bias): identical initializers, which the deduplication below stores once, as it would an
unrolled model's copies (docs/model.md#onnx).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx_ir
import torch
from onnx_ir.passes.common import ClearMetadataAndDocStringPass
from torch import nn

from albert_model import AlbertConfig, AlbertModel
from albert_model.hf import load_hf_encoder, load_hf_pretrained

from ..errors import BadInput, ConfigError, MissingInput, RefusedPath
from ..finetuning.families import FAMILIES
from ..inference.int8_cpu import PRODUCT_MAX
from ..inference.onnx_runner import ENCODER_OUTPUTS, cpu_session
from ..storage.models import USAGE_KEYS
from .files import deduplicate_initializers, save_model
from .fuse import fuse_attention
from .quantize import Quantized, quantize_int8

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
# (batch, sequence) of the agreement check: neither is the export's example shape (2, 8), so the
# check also shows that the dynamic axes work.
CHECK_SHAPES = ((3, 17), (2, 40))
_EXAMPLE_SHAPE = (2, 8)
OPSETS = range(18, 23)  # measured with torch 2.13 and onnxruntime 1.32 (docs/model.md#onnx)
_EXAMPLE_CHOICES, _CHECK_CHOICES = 3, 4  # multiple choice: (batch, choices, sequence)
QUANTIZATIONS = ("int8",)
"""`--quantize` choices (pipelines/export/quantize.py)."""
AGREEMENT_ROWS = (64, 64)
"""(batch, sequence) of the int8 check's rows, beside CHECK_SHAPES' (random token ids: a model's
predictions on them are closer to ties than on text, so the figure understates agreement on text)."""


@dataclass(frozen=True)
class HeadExport:
    """What one architecture exports: the model class it loads as, and its outputs (their names are
    also the model's output fields, for the classes that return several)."""

    model_class: type[nn.Module]
    outputs: tuple[str, ...]
    choices: bool = False
    """Inputs are (batch, choices, sequence) instead of (batch, sequence)."""


_ENCODER = HeadExport(AlbertModel, ("last_hidden_state", "pooler_output"))
# config.json's architectures[0] -> the export. Pretraining exports its encoder (the MLM and SOP
# heads serve only pretraining); a fine-tuned model, its family's head (several families share one:
# a sequence classifier's logits are its scores whatever its labels are).
HEADS: dict[str, HeadExport] = {
    "AlbertModel": _ENCODER,
    "AlbertForPreTraining": _ENCODER,
    **{f.architecture: HeadExport(f.model_class, f.outputs, f.choices) for f in FAMILIES.values()},
}
EMBEDDING_EXPORT = HeadExport(AlbertModel, ENCODER_OUTPUTS)
"""`--embedding`: any folder's encoder alone, without its head or pooler (load_hf_encoder): the last
hidden state that sentence embeddings pool (pipelines/inference/embedding.py)."""


@dataclass(frozen=True)
class ExportableModel:
    """A model folder loaded for export: the model in eval mode and what its architecture exports."""

    directory: Path
    architecture: str
    head: HeadExport
    model: nn.Module
    usage: dict[str, str]
    """The folder's USAGE_KEYS that it has, each as JSON."""

    @property
    def config(self) -> AlbertConfig:
        return self.model.config


@dataclass(frozen=True)
class OnnxExport:
    """What `export_onnx` wrote."""

    path: Path
    opset: int
    onnx_bytes: int
    weights_bytes: int
    """The folder's weight files (model.safetensors), for the size ratio."""
    duplicates_removed: int
    seconds: float
    quantized: Quantized | None = None
    attention_fused: int = 0
    """MultiHeadAttention nodes (`fuse`: fuse.py)."""

    @property
    def ratio(self) -> float:
        return self.onnx_bytes / self.weights_bytes


def load_exportable(directory: str | os.PathLike, embedding: bool = False) -> ExportableModel:
    """The folder's model, as its config.json's `architectures[0]` names it, or with `embedding` its
    encoder alone (EMBEDDING_EXPORT); BadInput for anything but an ALBERT folder of a supported
    architecture."""
    directory = Path(directory)
    config_file = directory / "config.json"
    if not config_file.is_file():
        if not directory.exists():
            raise MissingInput(f"{directory}: does not exist")
        raise MissingInput(f"{directory}: no config.json (not a transformers-format ALBERT folder)")
    try:
        hf_config = json.loads(config_file.read_text())
    except ValueError as e:
        raise BadInput(f"{config_file}: not JSON ({e})") from e
    if hf_config.get("model_type") != "albert":
        raise BadInput(f"{config_file}: model_type={hf_config.get('model_type')!r}, not an ALBERT export")
    architecture = (hf_config.get("architectures") or ["AlbertModel"])[0]
    if architecture not in HEADS:
        raise BadInput(
            f"{config_file}: cannot export architecture {architecture!r} to ONNX; supported: {', '.join(HEADS)}"
        )
    if not _weight_files(directory):
        raise MissingInput(f"{directory}: no model.safetensors (nor sharded safetensors or pytorch_model.bin)")
    head = EMBEDDING_EXPORT if embedding else HEADS[architecture]
    try:
        model = load_hf_encoder(directory) if embedding else load_hf_pretrained(directory, head.model_class)
    except ValueError as e:
        raise BadInput(f"{directory}: {e}") from e
    usage = {key: json.dumps(hf_config[key], sort_keys=True) for key in USAGE_KEYS if key in hf_config}
    return ExportableModel(directory, architecture, head, model.eval(), usage)


def export_onnx(
    exportable: ExportableModel,
    output: str | os.PathLike,
    opset: int | None = None,
    force: bool = False,
    quantize: str | None = None,
    fuse: bool = False,
) -> OnnxExport:
    """Write the model to `output` (refusing an existing file unless `force`), its shared weights
    stored once and the folder's usage in its metadata; `opset` None is torch's default; `quantize`
    "int8": its weights int8 (quantize.py); `fuse`: its attention onnxruntime's MultiHeadAttention
    (fuse.py). The file appears only once complete."""
    output = check_target(output, exportable.directory, opset, force)
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ConfigError(f"--quantize {quantize}: the choices are {', '.join(QUANTIZATIONS)}")
    output.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    program = _torch_export(exportable, opset)
    # Each node's debugging metadata (its Python stack trace, module path, FX node) is ~2 KB of
    # text per node, and there are nodes per application of the shared layer: as much as the
    # tiny model's weights. It names local paths too.
    ClearMetadataAndDocStringPass()(program.model)
    program.model.metadata_props.update(exportable.usage)
    quantized = quantize_int8(program.model) if quantize == "int8" else None
    fused = fuse_attention(program.model) if fuse else 0
    removed = deduplicate_initializers(program.model)
    written = save_model(program.model, output)
    return OnnxExport(
        path=output,
        opset=program.model.opset_imports[""],
        onnx_bytes=written,
        weights_bytes=sum(f.stat().st_size for f in _weight_files(exportable.directory)),
        duplicates_removed=removed,
        seconds=time.perf_counter() - start,
        quantized=quantized,
        attention_fused=fused,
    )


def quantize_export(
    fp32: str | os.PathLike, output: str | os.PathLike, force: bool = False, product_max: int = PRODUCT_MAX
) -> Quantized:
    """An fp32 export's int8 copy at `output`, as `export_onnx(quantize="int8")` writes it, without
    tracing the model again (one trace for both files: the benches, the tests); `product_max` the
    MatMul weights' range (quantize_int8's: 127 writes the full-range file the benches contrast)."""
    return _rewrite_export(fp32, output, force, functools.partial(quantize_int8, product_max=product_max))


def fuse_export(source: str | os.PathLike, output: str | os.PathLike, force: bool = False) -> int:
    """An export's (fp32 or int8) copy at `output` with its attention fused, as `export_onnx(fuse=True)`
    writes it, without tracing the model again; its MultiHeadAttention nodes."""
    return _rewrite_export(source, output, force, fuse_attention)


def _rewrite_export(source, output, force: bool, rewrite):
    output = Path(output)
    if output.exists() and not force:
        raise RefusedPath(f"{output} exists; pass --force to replace it")
    model = onnx_ir.load(source)
    result = rewrite(model)
    deduplicate_initializers(model)
    save_model(model, output)
    return result


def check_target(
    output: str | os.PathLike, model_dir: str | os.PathLike, opset: int | None = None, force: bool = False
) -> Path:
    """`output` as a Path, if it may be written with `opset` from `model_dir`: RefusedPath for a path
    where the export reads (`--force` or not), an existing file without `force` or a directory,
    ConfigError for an opset outside OPSETS."""
    output = Path(output)
    if output.is_dir():
        raise RefusedPath(f"{output} is a directory")
    _check_apart(output, Path(model_dir))
    if output.exists() and not force:
        raise RefusedPath(f"{output} exists; pass --force to replace it")
    if opset is not None and opset not in OPSETS:
        raise ConfigError(
            f"--opset {opset}: the export supports opsets {OPSETS[0]} to {OPSETS[-1]} (torch's exporter starts at "
            f"{OPSETS[0]}; from {OPSETS[-1] + 1} attention becomes ONNX's Attention op, which onnxruntime's CPU "
            "provider refuses with the padding mask's shape [B, 1, 1, S])"
        )
    return output


def _check_apart(output: Path, model_dir: Path) -> None:
    """RefusedPath where a file the export writes (OUTPUT, its partial file, OUTPUT.data) would land
    in the model folder, or on a file the export reads, links followed: `export onnx best
    best/model.safetensors --force` would replace the weights it exports."""
    folder = model_dir.resolve()
    read = {(model_dir / "config.json").resolve(), *(p.resolve() for p in _weight_files(model_dir))}
    for written in (output, output.with_name(f".{output.name}.partial"), output.with_name(output.name + ".data")):
        target = written.resolve()
        if target in read:
            where = f"{target} is a file the export reads"
        elif target == folder or folder in target.parents:
            where = f"inside the model folder {model_dir}"
        else:
            continue
        raise RefusedPath(f"{output}: {where}; the export never writes where it reads (--force or not)")


def check_inputs(config: AlbertConfig, batch: int, sequence: int, choices: int | None = None, seed: int = 0):
    """Random token ids, both token types, and padding (row 0 full, each further row shorter), as int64
    numpy arrays by input name; (batch, choices, sequence) with `choices`."""
    generator = np.random.default_rng(seed)
    shape = (batch, sequence) if choices is None else (batch, choices, sequence)
    positions = np.arange(sequence)
    lengths = sequence - np.arange(batch) * sequence // (2 * batch)
    rows = (positions < lengths[:, None]).astype(np.int64)  # (B, S)
    attention_mask = np.broadcast_to(rows if choices is None else rows[:, None, :], shape).copy()
    token_type_ids = np.broadcast_to((positions >= sequence // 2).astype(np.int64), shape).copy()
    input_ids = generator.integers(5, config.vocab_size, shape, dtype=np.int64) * attention_mask  # padding: id 0
    return {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def max_abs_difference(
    exportable: ExportableModel, path: str | os.PathLike, shapes: tuple[tuple[int, int], ...] = CHECK_SHAPES
) -> float:
    """The largest |onnxruntime - PyTorch| over every output, on onnxruntime's CPU provider as the
    onnx backend runs it (cpu_session), for `check_inputs` of each (batch, sequence) in `shapes`."""
    session = cpu_session(str(path))
    worst = 0.0
    for batch, sequence in shapes:
        inputs = check_inputs(exportable.config, batch, sequence, _CHECK_CHOICES if exportable.head.choices else None)
        ours = session.run(list(exportable.head.outputs), inputs)
        for name, a, b in zip(exportable.head.outputs, ours, torch_outputs(exportable, inputs)):
            if a.shape != b.shape:
                raise ValueError(f"{path}: output {name} has shape {a.shape} where PyTorch's has {b.shape}")
            worst = max(worst, float(np.abs(a - b).max()))
    return worst


def prediction_agreement(exportable: ExportableModel, path: str | os.PathLike) -> float:
    """The share of predictions onnxruntime's outputs and PyTorch's agree on: the argmax over each
    output's last axis (a class, a choice, an answer start or end, a position's tag), for
    `check_inputs` of AGREEMENT_ROWS and CHECK_SHAPES; the check of an int8 export, whose outputs
    differ from PyTorch's by ~1e-3, not 1e-6."""
    session = cpu_session(str(path))
    agreed = total = 0
    for batch, sequence in (AGREEMENT_ROWS, *CHECK_SHAPES):
        inputs = check_inputs(exportable.config, batch, sequence, _CHECK_CHOICES if exportable.head.choices else None)
        ours = session.run(list(exportable.head.outputs), inputs)
        for a, b in zip(ours, torch_outputs(exportable, inputs)):
            same = a.argmax(-1) == b.argmax(-1)
            agreed, total = agreed + int(same.sum()), total + same.size
    return agreed / total


@torch.no_grad()
def torch_outputs(exportable: ExportableModel, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The PyTorch model's outputs for `inputs`, in the ONNX file's output order."""
    out = exportable.model(**{name: torch.from_numpy(array) for name, array in inputs.items()})
    values = [out] if isinstance(out, torch.Tensor) else [getattr(out, name) for name in exportable.head.outputs]
    return [value.numpy() for value in values]


def _torch_export(exportable: ExportableModel, opset: int | None):
    batch, sequence = _EXAMPLE_SHAPE
    config = exportable.config
    example = {
        name: torch.from_numpy(array)
        for name, array in check_inputs(
            config, batch, sequence, _EXAMPLE_CHOICES if exportable.head.choices else None
        ).items()
    }
    batch_dim = torch.export.Dim("batch")
    sequence_dim = torch.export.Dim("sequence", max=config.max_position_embeddings)
    axes = {0: batch_dim, 2: sequence_dim, 1: torch.export.Dim("choices")} if exportable.head.choices else None
    dynamic = {name: axes or {0: batch_dim, 1: sequence_dim} for name in INPUT_NAMES}
    with warnings.catch_warnings(), _quiet("torch.onnx._internal.exporter._registration"):
        # torch's own noise: its pytree deprecation, and a note that each axis keeps the name we gave it
        warnings.filterwarnings("ignore", message=".*LeafSpec.*is deprecated")
        warnings.filterwarnings("ignore", message=r"# The axis name: .* will not be used")
        return torch.onnx.export(
            exportable.model,
            (),
            kwargs=example,  # in INPUT_NAMES' order: the ONNX inputs' order
            dynamic_shapes=dynamic,
            output_names=list(exportable.head.outputs),
            opset_version=opset,
            dynamo=True,
            verbose=False,
        )


def _weight_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("model*.safetensors")) or sorted(directory.glob("pytorch_model.bin"))


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Raise a logger's level to ERROR for a block: torch warns on every export that torchvision's
    operators cannot be registered, which ALBERT never uses."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


__all__ = [
    "CHECK_SHAPES",
    "EMBEDDING_EXPORT",
    "HEADS",
    "INPUT_NAMES",
    "OPSETS",
    "QUANTIZATIONS",
    "USAGE_KEYS",
    "ExportableModel",
    "HeadExport",
    "OnnxExport",
    "check_inputs",
    "check_target",
    "export_onnx",
    "fuse_export",
    "load_exportable",
    "max_abs_difference",
    "prediction_agreement",
    "quantize_export",
    "torch_outputs",
]
