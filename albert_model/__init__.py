"""A PyTorch ALBERT (factorized embeddings, cross-layer sharing) with transformers-compatible names."""

from .config import PRESETS, SHARING_MODES, AlbertConfig
from .model import (
    AlbertForPreTraining,
    AlbertForSequenceClassification,
    AlbertModel,
    AlbertPreTrainingOutput,
    num_parameters,
)

__all__ = [
    "AlbertConfig",
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForSequenceClassification",
    "AlbertPreTrainingOutput",
    "num_parameters",
    "PRESETS",
    "SHARING_MODES",
]
