"""Checkpoint adapter to and from transformers' ALBERT format (config.json + safetensors).

Our parameter names are transformers' own, so the mapping is the identity except for the MLM
decoder, which we tie by passing the word embedding into the head instead of holding a copy.
Loading never unpickles arbitrary objects: safetensors, or torch.load(weights_only=True), whose
refusal of anything but tensors is one ValueError naming the file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from pickle import UnpicklingError  # what torch's restricted loader raises; nothing here unpickles
from typing import IO, Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .config import AlbertConfig
from .heads import AlbertForMultipleChoice, AlbertForTokenClassification
from .model import AlbertForPreTraining, AlbertForQuestionAnswering, AlbertForSequenceClassification, AlbertModel

log = logging.getLogger(__name__)

_CLASSES: dict[str, type[nn.Module]] = {
    "AlbertModel": AlbertModel,
    "AlbertForPreTraining": AlbertForPreTraining,
    "AlbertForSequenceClassification": AlbertForSequenceClassification,
    "AlbertForQuestionAnswering": AlbertForQuestionAnswering,
    "AlbertForMultipleChoice": AlbertForMultipleChoice,
    "AlbertForTokenClassification": AlbertForTokenClassification,
}
# transformers ties these to the word embedding and the head's bias.
_TIED = {
    "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "predictions.bias",
}
# Non-persistent buffers that older checkpoints saved; they carry no weights.
_IGNORED_SUFFIXES = ("embeddings.position_ids", "embeddings.token_type_ids")
_PREFIX = "albert."
# Config keys that fine-tuning may set apart from the pretrained checkpoint's.
_FINETUNING_KEYS = {
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "classifier_dropout_prob",
    "initializer_range",
    "num_labels",
}


def to_hf_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our model's weights under transformers' names (tied decoder included), same class."""
    model.config.to_hf_dict()  # fails for sharing modes transformers cannot express
    state = dict(model.state_dict().items())
    if isinstance(model, AlbertForPreTraining):
        for hf_key, our_key in _TIED.items():
            state[hf_key] = state[our_key]
    return state


WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
"""The files a folder's weights are read from, the first present only (safetensors, sharded
safetensors' index, transformers' legacy pickle)."""
LEGACY_WEIGHTS = WEIGHT_FILES[-1]


def weights_file(names: Iterable[str]) -> str | None:
    """Which of WEIGHT_FILES a folder holding `names` has its weights read from, if any."""
    present = set(names)
    return next((name for name in WEIGHT_FILES if name in present), None)


def load_legacy_weights(
    source: str | os.PathLike | IO[bytes], path: str | os.PathLike, map_location: str = "cpu"
) -> dict[str, torch.Tensor]:
    """A pytorch_model.bin's tensors, through torch's restricted unpickler (weights_only=True); one
    holding other pickled objects is a ValueError naming `path`, and nothing in it runs.
    `map_location="meta"` checks the file without allocating its tensors."""
    try:
        return torch.load(source, map_location=map_location, weights_only=True)
    except UnpicklingError as e:
        # torch's message is paragraphs of advice to unpickle it anyway; its cause names what it refused
        inner = e.__context__ if isinstance(e.__context__, UnpicklingError) else e
        reason = " ".join(str(inner).split(". ")[0].split())
        raise ValueError(
            f"{path}: not loaded: it holds pickled objects other than tensors ({reason}), and only tensors are "
            "ever unpickled; convert it to safetensors"
        ) from None


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    found = weights_file(os.listdir(directory)) if directory.is_dir() else None
    if found == "model.safetensors":
        return load_file(str(directory / found))
    if found == "model.safetensors.index.json":
        files = sorted(set(json.loads((directory / found).read_text())["weight_map"].values()))
        state: dict[str, torch.Tensor] = {}
        for name in files:
            state.update(load_file(str(directory / name)))
        return state
    if found == LEGACY_WEIGHTS:
        return load_legacy_weights(directory / found, directory / found)
    raise FileNotFoundError(f"{directory}: no {', '.join(WEIGHT_FILES[:-1])} or {LEGACY_WEIGHTS}")


def _match_prefix(state: dict[str, torch.Tensor], model: nn.Module) -> dict[str, torch.Tensor]:
    """transformers' bare AlbertModel saves without the `albert.` prefix; heads save with it."""
    ours_prefixed = not isinstance(model, AlbertModel)
    theirs_prefixed = any(k.startswith(_PREFIX) for k in state)
    if ours_prefixed and not theirs_prefixed:
        return {_PREFIX + k: v for k, v in state.items()}
    if not ours_prefixed and theirs_prefixed:
        return {k[len(_PREFIX) :]: v for k, v in state.items() if k.startswith(_PREFIX)}
    return state


def load_hf_pretrained(
    directory: str | os.PathLike, model_cls: type[nn.Module] | None = None, strict: bool = True
) -> nn.Module:
    """Build one of our models from a transformers ALBERT directory (config.json + weights).

    `model_cls` defaults to the checkpoint's architecture. With strict=False, weights the
    checkpoint lacks (say, a SOP head when continuing from a masked-LM checkpoint) keep their
    fresh initialisation and are logged; unexpected weights always fail.
    """
    directory = Path(directory)
    hf_config = _read_config(directory)
    config = AlbertConfig.from_hf_dict(hf_config)
    if model_cls is None:
        architecture = (hf_config.get("architectures") or ["AlbertModel"])[0]
        model_cls = _CLASSES.get(architecture, AlbertForPreTraining)
    model = model_cls(config)
    _load_checked(model, _checkpoint_state(directory, model), directory, strict)
    return model


def apply_pretrained_encoder(model: nn.Module, directory: str | os.PathLike) -> None:
    """Load a transformers ALBERT directory's encoder (of any architecture) into `model.albert`,
    as fine-tuning starts: the checkpoint's heads are left out and `model`'s task head keeps its
    initialisation. The checkpoint's pooler is left out too where `model.albert` has none (question
    answering); every other encoder weight must be in the checkpoint, and the two configs must
    agree on everything but dropout, initialisation and labels (weights of the same shapes would
    otherwise load into another depth or activation unnoticed)."""
    directory = Path(directory)
    theirs = AlbertConfig.from_hf_dict(_read_config(directory)).to_hf_dict()
    ours = model.config.to_hf_dict()
    differ = sorted(k for k in ours if k not in _FINETUNING_KEYS and ours[k] != theirs[k])
    if differ:
        raise ValueError(f"{directory}: config differs from the model's in {differ}")
    state = _checkpoint_state(directory, model.albert)
    if model.albert.pooler is None:
        state = {k: v for k, v in state.items() if not k.startswith("pooler.")}
    _load_checked(model.albert, state, directory, strict=True)


def load_hf_encoder(directory: str | os.PathLike) -> AlbertModel:
    """The encoder of a transformers ALBERT directory of any architecture (a pretraining export, a
    fine-tuned head's), without its heads and pooler: what its last hidden state is computed by, as
    transformers' `AutoModel` computes it (a pooler changes no hidden state). Every other encoder
    weight must be in the checkpoint."""
    directory = Path(directory)
    model = AlbertModel(AlbertConfig.from_hf_dict(_read_config(directory)), init=False, add_pooling_layer=False)
    state = {k: v for k, v in _checkpoint_state(directory, model).items() if not k.startswith("pooler.")}
    _load_checked(model, state, directory, strict=True)
    return model


def _read_config(directory: Path) -> dict[str, Any]:
    config_file = directory / "config.json"
    if not config_file.exists():
        raise FileNotFoundError(f"{config_file}: not found (a transformers ALBERT directory has one)")
    return json.loads(config_file.read_text())


def _checkpoint_state(directory: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """The directory's weights under `model`'s names: prefix matched, tied copies checked and dropped."""
    state = {k: v for k, v in _read_weights(directory).items() if not k.endswith(_IGNORED_SUFFIXES)}
    state = _match_prefix(state, model)
    for hf_key, our_key in _TIED.items():
        tied = state.pop(hf_key, None)
        if tied is not None and our_key in state and not torch.equal(tied, state[our_key]):
            raise ValueError(f"{directory}: {hf_key} is not tied to {our_key}; ALBERT ties them")
    return state


def _load_checked(model: nn.Module, state: dict[str, torch.Tensor], directory: Path, strict: bool) -> None:
    name = type(model).__name__
    expected = set(model.state_dict())
    unexpected = sorted(set(state) - expected)
    missing = sorted(expected - set(state))
    if unexpected:
        raise ValueError(f"{directory}: weights {name} does not have: {unexpected}")
    if missing and strict:
        raise ValueError(f"{directory}: weights missing for {name}: {missing}")
    if missing:
        log.warning("%s: freshly initialised (not in the checkpoint): %s", directory, missing)
    model.load_state_dict(state, strict=False)


MODEL_INPUT_NAMES = ("input_ids", "token_type_ids", "attention_mask")
"""What the tokenizer returns, as tokenizer_config.json names it: transformers 5's AlbertTokenizer
leaves token_type_ids out unless told (transformers#48128), and a text pair then feeds the model
all-zero segment ids."""
UNCASED = {"do_lower_case": True, "keep_accents": False, "remove_space": True}
"""The tokenizer settings of a vocabulary trained on normalised text (pipelines/prep/text.py)."""


def tokenizer_config(model_max_length: int, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """tokenizer_config.json for transformers' AlbertTokenizer: `settings` (a pretrained folder's,
    which keeps its casing) or UNCASED, with the model's inputs and the length it was trained at."""
    return {
        "tokenizer_class": "AlbertTokenizer",
        **(settings if settings is not None else UNCASED),
        "model_input_names": list(MODEL_INPUT_NAMES),
        "model_max_length": model_max_length,
    }


def save_hf_pretrained(
    model: nn.Module,
    directory: str | os.PathLike,
    spiece_model: str | os.PathLike | None = None,
    id2label: dict[int, str] | None = None,
    problem_type: str | None = None,
    extra_config: dict[str, Any] | None = None,
    max_seq_length: int | None = None,
    tokenizer_settings: dict[str, Any] | None = None,
) -> Path:
    """Write config.json, model.safetensors (and spiece.model with its tokenizer_config.json) that
    transformers loads. `problem_type` (transformers' key: "single_label_classification",
    "multi_label_classification" or "regression") tells a sequence classifier's loss there.
    `extra_config`: keys of our own for config.json (transformers keeps them as attributes, our
    loader ignores them). `max_seq_length`: the length the model was trained at, the tokenizer's
    `model_max_length` (its position embeddings' when None); `tokenizer_settings`: see
    `tokenizer_config`."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config: AlbertConfig = model.config
    hf_config: dict[str, Any] = config.to_hf_dict()
    hf_config["architectures"] = [type(model).__name__]
    if isinstance(model, (AlbertForPreTraining, AlbertForQuestionAnswering)):
        hf_config["num_labels"] = 2  # transformers sizes its SOP and start/end heads by num_labels
    if problem_type is not None:
        hf_config["problem_type"] = problem_type
    hf_config.update(extra_config or {})
    if id2label is not None:
        hf_config["id2label"] = {str(i): name for i, name in id2label.items()}
        hf_config["label2id"] = {name: i for i, name in id2label.items()}
    (directory / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")

    # transformers re-ties the decoder on load, and safetensors refuses shared storage.
    state = {k: v.detach().cpu().contiguous() for k, v in to_hf_state_dict(model).items() if k not in _TIED}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})

    if spiece_model is not None:
        shutil.copyfile(spiece_model, directory / "spiece.model")
        settings = tokenizer_config(max_seq_length or config.max_position_embeddings, tokenizer_settings)
        (directory / "tokenizer_config.json").write_text(json.dumps(settings, indent=2) + "\n")
    return directory


__all__ = [
    "LEGACY_WEIGHTS",
    "MODEL_INPUT_NAMES",
    "UNCASED",
    "WEIGHT_FILES",
    "apply_pretrained_encoder",
    "load_hf_encoder",
    "load_hf_pretrained",
    "load_legacy_weights",
    "save_hf_pretrained",
    "to_hf_state_dict",
    "tokenizer_config",
    "weights_file",
]
