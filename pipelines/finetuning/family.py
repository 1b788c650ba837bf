"""What a fine-tuning task family declares, as a stage is declared: its model head and the
transformers class it exports to, how its input becomes features, how features become a batch, its
loss, and how the eval outputs become its metrics and predictions files. The trial loop (trial.py, loop.py) is written
once against this; pipelines/finetuning/families.py lists the families by `finetune.task`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from ..config import FinetuneSection
from .loop import Collate
from .tokenizer import PairTokenizer

Feature = tuple[Sequence[int], Sequence[int]]
"""One model input: (input_ids, token_type_ids), unpadded."""


@dataclass
class EncodedTask:
    """A task's features and targets, what its evaluation reads besides the model's outputs, and the
    account of its inputs: what every trial receives (with the pretrained files)."""

    train: list[Feature]
    train_targets: np.ndarray
    """One row per training feature: class ids, floats, or (start, end) token positions."""
    eval: list[Feature]
    eval_targets: np.ndarray
    reference: Any = None
    """What the family's evaluation reads besides the outputs and eval_targets (QA: the windows,
    contexts and gold answers); None where it needs nothing more."""
    label_names: list[str] | None = None
    """Class names by id (classification); None otherwise."""
    num_labels: int = 1
    accounting: dict[str, Any] = field(default_factory=dict)
    """The manifest's `examples`: per input read/usable/rejected, per split used/unsampled."""
    truncated: dict[str, int] = field(default_factory=dict)
    """The manifest's `truncated`: what was cut to fit finetune.max_seq_length."""
    eval_examples: int = 0
    """Evaluated examples (questions for QA, which has several features for a long context)."""


@dataclass(frozen=True)
class Evaluation:
    """One evaluation: metrics (floats, reported to Tune) and the predictions files, name -> text,
    written with the checkpoint and, for the best trial, into the stage's folder."""

    metrics: dict[str, float]
    files: dict[str, str] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    """What applying the model as this evaluation did needs beyond its labels and
    finetune.max_seq_length (JSON values): the post-processing's settings, QA's windows, answer
    search and the no-answer threshold it chose, token classification's tags. Recorded in the
    checkpoint's config.json (pipelines/storage/models.py `ModelUsage`)."""


class TaskFamily(Protocol):
    name: str
    """The finetune.task value."""
    metrics: tuple[str, ...]
    """The tune.metric choices, the default first (config/tuning.py's TUNE_METRICS holds the same)."""
    model_class: type[nn.Module]
    """Our head (albert_model); its class name is the export's transformers class."""
    problem_type: str | None
    """The export's config.json `problem_type` (transformers picks the loss by it); None: transformers
    infers it (from num_labels and the labels' dtype)."""
    target_dtype: torch.dtype
    collate: Collate
    """The features at some indices as the model's keyword inputs (and `labels`, given targets); the
    families here pad one sequence per feature (loop.collate)."""

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        """Read, split, subsample and featurize the configured task; every input row used or counted."""
        ...

    def loss_sum(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        """The summed loss of a batch's model outputs (fp32)."""
        ...

    def scores(self, outputs: Any) -> torch.Tensor:
        """A batch's model outputs as one tensor [B, ...] that evaluation reads."""
        ...

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        """Metrics and predictions of the eval features' `scores` (in feature order, padded along
        dimension 1 to the widest batch)."""
        ...


__all__ = ["EncodedTask", "Evaluation", "Feature", "TaskFamily"]
