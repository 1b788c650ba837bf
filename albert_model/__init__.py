"""A PyTorch ALBERT (factorized embeddings, cross-layer sharing) with transformers-compatible names.

The configuration imports without torch; the model classes import it on first use (PEP 562), so a
process that only reads configs (the command line, the data stage's workers) does not pay torch's
import (~2 s on a 2-core machine)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import PRESETS, SHARING_MODES, AlbertConfig

_MODEL_NAMES = {
    **dict.fromkeys(
        (
            "AlbertForPreTraining",
            "AlbertForQuestionAnswering",
            "AlbertForSequenceClassification",
            "AlbertModel",
            "AlbertPreTrainingOutput",
            "AlbertQuestionAnsweringOutput",
            "num_parameters",
        ),
        ".model",
    ),
    **dict.fromkeys(("AlbertForMultipleChoice", "AlbertForTokenClassification"), ".heads"),
}

if TYPE_CHECKING:
    from .heads import AlbertForMultipleChoice, AlbertForTokenClassification
    from .model import (
        AlbertForPreTraining,
        AlbertForQuestionAnswering,
        AlbertForSequenceClassification,
        AlbertModel,
        AlbertPreTrainingOutput,
        AlbertQuestionAnsweringOutput,
        num_parameters,
    )


def __getattr__(name: str) -> Any:
    if name in _MODEL_NAMES:
        return getattr(importlib.import_module(_MODEL_NAMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AlbertConfig",
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForSequenceClassification",
    "AlbertForQuestionAnswering",
    "AlbertForMultipleChoice",
    "AlbertForTokenClassification",
    "AlbertPreTrainingOutput",
    "AlbertQuestionAnsweringOutput",
    "num_parameters",
    "PRESETS",
    "SHARING_MODES",
]
