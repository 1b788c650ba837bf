"""Model folders in transformers' ALBERT layout, local or s3:// (a finetune.pretrained, a
train.init_from, the pretrain stage's hf/, a fine-tuned export, a predict.model, serve's MODEL_DIR):
the check that a path is one, its config.json, its files read on the driver (a pickled
pytorch_model.bin refused there, before any worker loads it) and written to a local folder where a
model loads, and a fine-tuned model written as an export with its tokenizer and the record of how
it is applied (ModelUsage, config.json's `albert_ray`), which predict, serve and the ONNX export
take their defaults from. torch is imported only where weights are checked or written: the command
line reads configs without it."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import BadInput, MissingInput
from . import exists, join, list_names, read_bytes

if TYPE_CHECKING:
    from torch import nn

TOKENIZER_FILES = ("spiece.model", "tokenizer_config.json")
"""The tokenizer's files in a model folder: SentencePiece's model and transformers' settings."""
RECORD = "albert_ray"
"""config.json's key holding a fine-tuned export's ModelUsage: transformers keeps it as a config
attribute (saved again with the model) and reads nothing in it; our loader ignores it."""
USAGE_KEYS = (RECORD, "id2label", "problem_type")
"""config.json's keys on how the model is applied (the record of its fine-tuning, its labels, a
sequence classifier's problem type): an ONNX export keeps them in its metadata as JSON, so a runtime
holding only the file applies it as the folder says, and the onnx backend checks a file against its
folder by them."""


@dataclass(frozen=True)
class ModelUsage:
    """How a fine-tuned export is applied to give the answers its fine-tuning's evaluation gave
    (docs/model.md#how-an-export-is-applied)."""

    task: str
    """The family that fine-tuned it (finetune.task)."""
    max_seq_length: int
    """Tokens per input, [CLS] and [SEP]s included (finetune.max_seq_length; QA: per window)."""
    settings: dict[str, Any] = field(default_factory=dict)
    """The family's post-processing settings (its evaluation's `usage`): QA's windows, answer
    search and no-answer threshold; token classification's tag scheme and tagged piece."""

    def to_json(self) -> dict[str, Any]:
        return {"task": self.task, "max_seq_length": self.max_seq_length, **self.settings}


def read_usage(config: dict[str, Any], where: str) -> ModelUsage | None:
    """The ModelUsage a model folder's config.json records; None where it records none (a pretraining
    export, a model fine-tuned elsewhere or before the record existed). A malformed record is BadInput
    naming `where`."""
    record = config.get(RECORD)
    if record is None:
        return None
    task, length = (record.get(k) if isinstance(record, dict) else None for k in ("task", "max_seq_length"))
    if not isinstance(task, str) or not task or type(length) is not int or length < 4:
        raise BadInput(
            f"{where}: config.json's {RECORD} is not a record of fine-tuning ({{task: a name, max_seq_length: "
            f"4 or more, ...}}): {json.dumps(record)[:200]}"
        )
    return ModelUsage(task, length, {k: v for k, v in record.items() if k not in ("task", "max_seq_length")})


def trained_length(settings: Mapping[str, Any]) -> int | None:
    """The length a folder's tokenizer cuts at with truncation (tokenizer_config.json's
    `model_max_length`, `settings` its parsed content): what transformers' tokenizer applies the
    folder at, and where the exports record the length they were trained at (a pretraining export's
    data.max_seq_length). None without a length in it."""
    length = settings.get("model_max_length")
    return length if type(length) is int and length >= 4 else None


def tokenizer_length(tokenizer_config: bytes | None) -> int | None:
    """`trained_length` of a tokenizer_config.json's bytes; None without the file or a mapping in it."""
    if tokenizer_config is None:
        return None
    try:
        settings = json.loads(tokenizer_config)
    except ValueError:  # the tokenizer's own loading names what is wrong with it
        return None
    return trained_length(settings) if isinstance(settings, dict) else None


def applied_length(
    config: dict[str, Any],
    explicit: int | None,
    key: str,
    where: str,
    fallback: int | None = None,
    tokenizer: int | None = None,
) -> int:
    """Tokens per input a model folder (its config.json: `config`) is applied with: `explicit`, the
    value of `key`; else the length it was fine-tuned at (its ModelUsage); else its tokenizer's
    (`tokenizer`: tokenizer_length, where within its position embeddings: a tokenizer of no set
    length says ~1e30); else `fallback`; else 512 capped by its position embeddings. One beyond them
    is BadInput naming where it came from."""
    positions = int(config.get("max_position_embeddings", 512))
    usage = read_usage(config, where)
    if explicit:
        length, source = explicit, key
    elif usage is not None:
        length, source = usage.max_seq_length, f"{where}/config.json's {RECORD}.max_seq_length"
    elif tokenizer is not None and tokenizer <= positions:
        length, source = tokenizer, f"{where}/tokenizer_config.json's model_max_length"
    else:
        length, source = fallback or min(512, positions), key
    if length > positions:
        raise BadInput(f"{source}={length} exceeds {where}'s max_position_embeddings={positions}")
    return length


def require_model_dir(path: str, key: str, hint: str = "") -> None:
    """MissingInput naming `key` unless `path` holds a config.json (saying so where `path` itself does
    not exist: a mistyped path)."""
    if not exists(join(path, "config.json")):
        if not exists(path):
            why = f" ({hint.removeprefix('; ')})" if hint else ""  # a hint reads "; the default ... needs ..."
            raise MissingInput(f"{key}: {path} does not exist{why}")
        raise MissingInput(f"{key}: {path} has no config.json (not a transformers ALBERT directory{hint})")


def read_model_config(path: str, key: str) -> dict[str, Any]:
    """The directory's config.json (transformers' AlbertConfig keys)."""
    require_model_dir(path, key)
    return json.loads(read_bytes(join(path, "config.json")))


def refuse_pickled_weights(data: bytes, path: str, key: str) -> None:
    """BadInput naming `key` when `data`, the pytorch_model.bin at `path`, holds pickled objects other
    than tensors; nothing in it runs, and no tensor is allocated."""
    from albert_model.hf import load_legacy_weights  # torch: not for every command

    try:
        load_legacy_weights(io.BytesIO(data), path, "meta")
    except ValueError as e:
        raise BadInput(f"{key}: {e}") from None


def check_weights(path: str, key: str) -> None:
    """refuse_pickled_weights for the weights the loader would read from `path`, when they are a
    pytorch_model.bin (checked on the driver, before any worker loads it)."""
    from albert_model.hf import LEGACY_WEIGHTS, weights_file

    if weights_file(list_names(path)) == LEGACY_WEIGHTS:
        refuse_pickled_weights(read_bytes(join(path, LEGACY_WEIGHTS)), join(path, LEGACY_WEIGHTS), key)


def read_model_files(directory: str, key: str, hint: str = "") -> dict[str, bytes]:
    """config.json, the weights (single or sharded safetensors, or pytorch_model.bin) and the
    tokenizer's files, local or s3://, by name: what a model is loaded from on any node (see
    `materialize`). Errors name `key`; a pytorch_model.bin the loader would read is checked here to
    hold tensors only, on the driver, not in every trial, worker or replica."""
    from albert_model.hf import LEGACY_WEIGHTS, WEIGHT_FILES, weights_file

    require_model_dir(directory, key, hint)
    names = list_names(directory)
    if "spiece.model" not in names:
        raise MissingInput(f"{key}: {directory} has no spiece.model (the tokenizer)")
    wanted = [
        n
        for n in names
        if n in ("config.json", *TOKENIZER_FILES, *WEIGHT_FILES)
        or (n.startswith("model-") and n.endswith(".safetensors"))
    ]
    files = {n: read_bytes(join(directory, n)) for n in wanted}
    if weights_file(files) == LEGACY_WEIGHTS:
        refuse_pickled_weights(files[LEGACY_WEIGHTS], join(directory, LEGACY_WEIGHTS), key)
    return files


def materialize(files: dict[str, bytes], directory: str) -> str:
    """A model folder's files (read_model_files) written to a local folder; returns it."""
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return directory


def save_model(
    model: nn.Module,
    pretrained_dir: str,
    directory: str,
    label_names: list[str] | None,
    problem_type: str | None,
    usage: ModelUsage,
) -> None:
    """A fine-tuned model as an export in transformers' layout, its head's class, recording `usage`,
    with the local pretrained folder's tokenizer (its casing kept) cutting at the length it was
    fine-tuned at."""
    from albert_model.hf import save_hf_pretrained

    settings_file = os.path.join(pretrained_dir, "tokenizer_config.json")
    settings = None
    if os.path.exists(settings_file):
        with open(settings_file) as f:
            settings = json.load(f)
    save_hf_pretrained(
        model,
        directory,
        spiece_model=os.path.join(pretrained_dir, "spiece.model"),
        id2label=dict(enumerate(label_names)) if label_names is not None else None,
        problem_type=problem_type,
        extra_config={RECORD: usage.to_json()},
        max_seq_length=usage.max_seq_length,
        tokenizer_settings=settings,
    )


__all__ = [
    "RECORD",
    "TOKENIZER_FILES",
    "ModelUsage",
    "applied_length",
    "check_weights",
    "materialize",
    "read_model_config",
    "read_model_files",
    "read_usage",
    "refuse_pickled_weights",
    "require_model_dir",
    "save_model",
    "tokenizer_length",
    "trained_length",
]
