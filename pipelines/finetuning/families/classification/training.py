"""Fine-tuning on classification: a class per text or text pair (any strings or numbers; `1` in a
csv and `"1"` in a jsonl are one class), stratified splits and subsamples, cross-entropy, accuracy,
macro-F1 and MCC (metrics.py), the class with the highest logit predicted. Without
finetune.train_path the task is the embedded BBC News articles (5 classes)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ....errors import BadInput
from ...distill_losses import softmax_kl_sum
from ...family import EncodedTask
from ...labels import encode_labels, label_names
from ...tables import Examples, bbc_news_examples
from .._sequence.task import refuse_embedded
from .._sequence.training import SequenceFamily
from . import FAMILY
from .metrics import classification_metrics


class ClassificationFamily(SequenceFamily):
    model_class = FAMILY.model_class
    target_dtype = torch.long
    stratified = True

    def embedded(self, cfg: FinetuneSection) -> Examples:
        return refuse_embedded(cfg) if cfg.text_pair_column else bbc_news_examples()

    def targets(self, cfg: FinetuneSection, train: Examples, evaluation: Examples) -> tuple[list[str], list, list]:
        names = label_names(train)
        if len(names) < 2:
            raise BadInput(
                f"{train.source}: column {cfg.label_column!r} has a single class ({names[0]!r}) "
                f"in the training examples; classification needs two or more"
            )
        return names, encode_labels(train, names, cfg.label_column), encode_labels(evaluation, names, cfg.label_column)

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.float(), targets, reduction="sum")  # the loss in fp32 under bf16 autocast

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        return softmax_kl_sum(outputs, teacher, temperature)

    def metrics_of(self, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
        return classification_metrics(logits, targets, num_labels)

    def predicted(self, scores: np.ndarray, names: list[str] | None) -> list[str]:
        return [names[int(j)] for j in np.asarray(scores).argmax(1)]

    def gold_logits(self, task: EncodedTask) -> np.ndarray:
        return np.eye(task.num_labels)[np.asarray(task.eval_targets, dtype=int)]

    def trivial(self, task: EncodedTask) -> tuple[str, np.ndarray]:
        counts = np.bincount(np.asarray(task.train_targets, dtype=int), minlength=task.num_labels)
        top = int(counts.argmax())
        share = counts[top] / max(1, counts.sum())
        logits = np.tile(np.eye(task.num_labels)[top], (len(task.eval_targets), 1))
        return f"majority class {task.label_names[top]!r} ({share:.0%} of the training examples)", logits


CLASSIFICATION = ClassificationFamily()

__all__ = ["CLASSIFICATION", "ClassificationFamily"]
