"""What a fine-tuning task family declares, as a stage is declared, in two parts. `Family`, what
the rest of the product knows of it: its finetune.task name, its tune.metric choices, the finetune
keys only it reads and its own config rules, its head (the export's transformers class) and that
head's outputs. It imports neither torch nor the family's code, so an entry point checks a config
against every family before any work. `TaskFamily`, its fine-tuning: how its input becomes
features, how features become a batch, its loss, and how the eval outputs become its metrics and
predictions files; the trial loop (trial.py, loop.py) is written once against it. Its inference
(inference.py's FamilyInference): how an unlabelled row becomes features and outputs a prediction,
which predict and serve drive.

pipelines/finetuning/families/__init__.py lists the families, one line each; a family is the folder
of that name there, whose __init__.py declares its Family."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import albert_model

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import nn

    from ..config import FinetuneSection
    from .inference import FamilyInference
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


@dataclass(frozen=True)
class Baseline:
    """What a trivial predictor scores on the eval set, to tell what the tuned model's figure means:
    the majority class, the most common right choice, every question unanswered, every word tagged O."""

    predictor: str
    """What it predicts, in words (`majority class 'sport' (23% of the training rows)`)."""
    metrics: dict[str, float]
    """Its scores under the family's metrics; empty where they are undefined (a constant has no correlation)."""


@dataclass(frozen=True)
class Family:
    name: str
    """The finetune.task value, and the name of the family's folder in families/."""
    metrics: tuple[str, ...]
    """The tune.metric choices, the default first: keys of its evaluation's metrics."""
    architecture: str
    """Its head: albert_model's class of this name, exported as the transformers class of the same name."""
    outputs: tuple[str, ...]
    """The head's outputs, as its ONNX export names them (a head with several returns them by name)."""
    training: str
    """`module:name` of its TaskFamily, imported when a trial needs it (families.task_family)."""
    keys: tuple[str, ...] = ()
    """The finetune keys that only the families declaring them read: under another task they change
    no result, so they are in no fingerprint (and adding one left the others' as they were)."""
    check: Callable[[FinetuneSection], None] | None = None
    """Its own rules on the finetune section, raising ConfigError (checks.check_config runs them)."""
    choices: bool = False
    """Its inputs are (batch, choices, sequence): a sequence per choice."""
    inference: str | None = None
    """`module:name` of its FamilyInference (predict's and serve's use of its exports), imported when
    a model is applied (load_inference); None: predict and serve refuse its exports by name."""
    reads_depths: bool = False
    """Its head can read the state after any application of the shared layer as an answer that can
    settle (the sequence head's [CLS]): it trains the head at every depth (finetune.exit_heads), for
    early exit (its inference's `exit_rule`)."""
    unrecorded: Callable[[Mapping[str, Any]], bool] | None = None
    """For an export of its head whose config.json records no family (fine-tuned elsewhere, or before
    the record: pipelines/storage/models.py), whether that config.json is this family's (by
    transformers' problem_type and labels); None: every export of its head is. Families sharing a
    head each say it."""

    @property
    def model_class(self) -> type[nn.Module]:
        """albert_model's head class (importing it imports torch)."""
        return getattr(albert_model, self.architecture)

    def load_training(self) -> TaskFamily:
        """Its TaskFamily, imported on first use (it imports torch)."""
        module, _, name = self.training.partition(":")
        return getattr(importlib.import_module(module), name)

    def load_inference(self) -> FamilyInference:
        """Its FamilyInference, imported on first use; the family must declare one (`inference`)."""
        module, _, name = (self.inference or "").partition(":")
        return getattr(importlib.import_module(module), name)


class TaskFamily(Protocol):
    model_class: type[nn.Module]
    """Our head (albert_model's class of its Family's architecture)."""
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

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        """The family's trivial predictor (learnt from the training targets alone) scored on the eval set."""
        ...


__all__ = ["Baseline", "EncodedTask", "Evaluation", "Family", "Feature", "TaskFamily"]
