"""A model of `albert-ray serve` read and checked before anything starts (ServedModel): its folder's
files, its family's request fields and labels, the length it is applied at, and with the onnx backend
its ONNX export, carried with its files to every replica (serve.py's endpoint, serve_multiplex.py's)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import BadInput
from ..inference.embedding import EMBEDDING_ROWS, has_task_head
from ..inference.onnx_runner import ENCODER_OUTPUTS, ONNX_FILE, encodes, read_onnx
from ..inference.predictor import exit_rule_of, family_of, inference_of, label_names
from ..storage.models import applied_length, read_model_files, tokenizer_length


@dataclass(frozen=True)
class ServedModel:
    """A model folder read and checked before anything starts."""

    files: dict[str, bytes]
    """Its files (storage.models.read_model_files, with its ONNX export as ONNX_FILE for the onnx
    backend), which every replica loads."""
    kind: str | None
    """Its task family; None for an encoder without a task head, served for embeddings alone."""
    fields: tuple[str, ...]
    """A request row's fields (its family's inference), `required` of them needed."""
    required: tuple[str, ...]
    labels: list[str] | None
    max_seq_length: int
    """The length it is applied at: --max-seq-length, or its default (storage.models.applied_length)."""
    predicts: bool = True
    """Whether POST <route> predicts: a task head, run by torch or by an export of the head. Decided
    here once, for every replica (which loads only the parts served)."""
    embeds: bool = True
    """Whether POST <route>/embed answers: any encoder in torch, an encoder export (--embedding) in onnx."""


def read_model(
    model_dir: str,
    max_seq_length: int | None,
    onnx: str | None = None,
    exit_patience: int | None = None,
    exit_entropy: float | None = None,
    key: str = "MODEL_DIR",
    onnx_key: str = "--onnx",
) -> ServedModel:
    """The model folder (local or s3://), checked before anything starts: a missing folder, an export
    of no family serve applies (an encoder alone is served for embeddings), a length over its
    positions, early exit where its family's prediction cannot exit early (predictor.exit_rule_of);
    with `onnx`, that ONNX export of it (onnx_runner.read_onnx: the head's, or its encoder's alone),
    carried with its files. Errors about the folder itself name `key`, about the ONNX file `onnx_key`."""
    files = read_model_files(model_dir, key)
    config = json.loads(files["config.json"])
    if has_task_head(config, model_dir):
        family = family_of(config, model_dir)
        inference = inference_of(family, model_dir)
        exit_rule_of(family, inference, exit_patience, exit_entropy, model_dir, onnx is not None)
        kind, outputs = family.name, family.outputs
    else:
        if exit_patience is not None or exit_entropy is not None:
            raise BadInput(
                f"{model_dir}: an encoder without a task head; early exit reads a sequence head at every depth"
            )
        kind, inference, outputs = None, EMBEDDING_ROWS, ENCODER_OUTPUTS
    trained = tokenizer_length(files.get("tokenizer_config.json"))
    length = applied_length(config, max_seq_length, "--max-seq-length", model_dir, tokenizer=trained)
    exported = None  # the ONNX export's outputs: an encoder's embeds, and predicts nothing
    if onnx is not None:
        data, exported = read_onnx(onnx, onnx_key, config, outputs, model_dir, encoder_too=True)
        files = {**files, ONNX_FILE: data}
    fields, required = tuple(inference.fields), tuple(inference.required)
    # a task head predicts and any encoder embeds, run by torch; an export's outputs decide
    encoder_export = exported is not None and encodes(exported)
    predicts, embeds = kind is not None and not encoder_export, exported is None or encoder_export
    return ServedModel(files, kind, fields, required, label_names(config), length, predicts, embeds)


__all__ = ["ServedModel", "read_model"]
