"""A PyTorch ALBERT (factorized embeddings, cross-layer sharing) with transformers-compatible names."""

from .config import PRESETS, SHARING_MODES, AlbertConfig
from .model import (
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertModel,
    AlbertPreTrainingOutput,
    AlbertQuestionAnsweringOutput,
    num_parameters,
)

__all__ = [
    "AlbertConfig",
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForSequenceClassification",
    "AlbertForQuestionAnswering",
    "AlbertPreTrainingOutput",
    "AlbertQuestionAnsweringOutput",
    "num_parameters",
    "PRESETS",
    "SHARING_MODES",
]
