"""An ONNX export of a model folder (`albert-ray export onnx`, fp32 or `--quantize int8`) run by
onnxruntime on CPU where the Predictor runs its torch model (predict.backend=onnx, serve --backend
onnx): the batch the family's collate makes in, the outputs as the head returns them. The file is
checked against the folder first: the usage it records (its fine-tuning's record, labels, problem
type) must be the folder's, whose tokenizer and settings encode and decode for it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import onnx
import onnxruntime
import torch
from torch import nn

from ..errors import BadInput, MissingInput
from ..storage import exists, read_bytes
from ..storage.models import USAGE_KEYS
from .int8_cpu import warn_if_full_range

SLOWER_FUSIONS = ("SkipLayerNormFusion",)
"""onnxruntime graph fusions every session the product opens leaves out (`disabled_optimizers`, as a
session config entry): on CPU, onnxruntime 1.32's SkipLayerNormalization kernel is a plain
per-element loop, several times slower than the Add and LayerNormalization it replaces (make run's
model: 288 against ~80 µs a call, 27% of its int8 call; docs/BENCHMARKS.md#int8-on-cpu)."""
ONNX_FILE = "model.onnx"
"""The ONNX file's name in a replica's copy of the model folder (storage.models.materialize)."""
ENCODER_OUTPUTS = ("last_hidden_state",)
"""The outputs of an export of a folder's encoder alone (`albert-ray export onnx --embedding`), which
sentence embeddings pool (embedding.py)."""


def encodes(outputs: tuple[str, ...] | list[str]) -> bool:
    """Whether an export with these outputs embeds: an encoder's, alone (--embedding) or with its
    pooler (what `export onnx` writes for a folder without a head: last_hidden_state, pooler_output),
    from which the embedder asks for the last hidden state alone."""
    return tuple(outputs[:1]) == ENCODER_OUTPUTS


def check_onnx(
    data: bytes,
    config: Mapping[str, Any],
    outputs: tuple[str, ...],
    where: str,
    model: str,
    encoder_too: bool = False,
) -> onnx.ModelProto:
    """`data` parsed, or BadInput unless it is an ONNX export with the model folder's usage metadata
    (the same record, labels and problem type as its config.json: `config`) and the `outputs`
    needed: the family's, or the encoder's for embeddings (either, with `encoder_too`)."""
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf's DecodeError and others: not an ONNX file
        raise BadInput(f"{where}: not an ONNX model ({type(e).__name__})") from None
    recorded = {p.key: p.value for p in proto.metadata_props if p.key in USAGE_KEYS}
    folder = {key: json.dumps(config[key], sort_keys=True) for key in USAGE_KEYS if key in config}
    differs = sorted(key for key in set(recorded) | set(folder) if recorded.get(key) != folder.get(key))
    if differs:
        raise BadInput(
            f"{where}: not an export of {model}: its {', '.join(differs)} differ from the folder's config.json "
            "(export the folder with `albert-ray export onnx`)"
        )
    names = [o.name for o in proto.graph.output]
    if list(outputs) != names and not ((encoder_too or tuple(outputs) == ENCODER_OUTPUTS) and encodes(names)):
        raise BadInput(
            f"{where}: outputs {names}, where {list(outputs)} are needed (`albert-ray export onnx {model} FILE` "
            "writes its head's, or a folder without one its encoder's; with --embedding, the encoder's "
            "last_hidden_state for sentence embeddings)"
        )
    return proto


def session_options(threads: int | None = None) -> onnxruntime.SessionOptions:
    """The options of the product's onnxruntime sessions: `threads` intra-op threads (None:
    onnxruntime's default), one inter-op thread, SLOWER_FUSIONS left out."""
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("optimization.disable_specified_optimizers", ";".join(SLOWER_FUSIONS))
    return options


def cpu_session(path: str, threads: int | None = None) -> onnxruntime.InferenceSession:
    """An onnxruntime CPU session of the ONNX file at `path` with `session_options(threads)`."""
    return onnxruntime.InferenceSession(path, session_options(threads), providers=["CPUExecutionProvider"])


class OnnxRunner(nn.Module):
    """The ONNX file in an onnxruntime CPU session (`cpu_session`) on `threads` threads, called as the head is."""

    def __init__(self, path: str, outputs: tuple[str, ...], threads: int):
        super().__init__()
        self.session = cpu_session(path, threads)
        self.inputs = [i.name for i in self.session.get_inputs()]  # input_ids, attention_mask, token_type_ids
        self.names = outputs

    def forward(self, **batch: torch.Tensor | None) -> Any:
        if batch["attention_mask"] is None:  # the loop drops a mask without padding (loader.to_device)
            batch["attention_mask"] = torch.ones_like(batch["input_ids"])
        values = self.session.run(list(self.names), {name: batch[name].numpy() for name in self.inputs})
        tensors = [torch.from_numpy(v) for v in values]
        return tensors[0] if len(tensors) == 1 else SimpleNamespace(**dict(zip(self.names, tensors)))


def read_onnx(
    path: str, key: str, config: Mapping[str, Any], outputs: tuple[str, ...], model: str, encoder_too: bool = False
) -> tuple[bytes, tuple[str, ...]]:
    """The ONNX file at `path` (local or s3://) and its outputs by name, checked against the model
    folder (`check_onnx`) and warned of if its int8 weights use all 8 bits
    (int8_cpu.warn_if_full_range); MissingInput naming `key` where there is none."""
    if not exists(path):
        raise MissingInput(f"{key}: {path} does not exist (write it with `albert-ray export onnx {model} {path}`)")
    data = read_bytes(path)
    proto = check_onnx(data, config, outputs, f"{key} {path}", model, encoder_too)
    warn_if_full_range(proto, f"{key} {path}")
    return data, tuple(o.name for o in proto.graph.output)


__all__ = [
    "ENCODER_OUTPUTS",
    "ONNX_FILE",
    "SLOWER_FUSIONS",
    "OnnxRunner",
    "check_onnx",
    "cpu_session",
    "encodes",
    "read_onnx",
    "session_options",
]
