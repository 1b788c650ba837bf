"""Fine-tuning on multi-label classification: any number of classes per text or text pair (a list
in jsonl or parquet, or text split at finetune.label_delimiter; labels.py), a sigmoid per class
(binary cross-entropy, transformers' problem_type "multi_label_classification"), micro- and
macro-F1 and subset accuracy (metrics.py), the classes whose logit is positive predicted. A row has
several classes, so its splits and subsamples are not stratified."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ....errors import BadInput
from ...distill_losses import sigmoid_kl_sum
from ...family import EncodedTask
from ...tables import Examples
from .._sequence.training import SequenceFamily
from . import FAMILY
from .labels import encode_label_sets, label_set, multi_label_names
from .metrics import multi_label_metrics


class MultiLabelFamily(SequenceFamily):
    model_class = FAMILY.model_class
    # a sigmoid per class: from num_labels > 1 transformers would infer one softmax over them
    problem_type = "multi_label_classification"

    def targets(
        self, cfg: FinetuneSection, train: Examples, evaluation: Examples
    ) -> tuple[list[str], np.ndarray, np.ndarray]:
        train_sets, eval_sets = ([label_set(v, cfg.label_delimiter) for v in e.labels] for e in (train, evaluation))
        names = multi_label_names(train_sets)
        if not names:
            raise BadInput(
                f"{train.source}: column {cfg.label_column!r} holds no class in the training examples "
                f"(finetune.task={cfg.task} reads lists, or text split at {cfg.label_delimiter!r})"
            )
        return (
            names,
            encode_label_sets(train, train_sets, names, cfg.label_column),
            encode_label_sets(evaluation, eval_sets, names, cfg.label_column),
        )

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = outputs.float()  # the loss in fp32 under bf16 autocast
        # transformers' BCEWithLogitsLoss averages over examples and classes: summed over the
        # batch's examples, each example's mean over its classes
        return F.binary_cross_entropy_with_logits(logits, targets.float(), reduction="sum") / logits.shape[1]

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        return sigmoid_kl_sum(outputs, teacher, temperature)

    def metrics_of(self, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
        return multi_label_metrics(logits, targets)

    def predicted(self, scores: np.ndarray, names: list[str] | None) -> list[list[str]]:
        return [[names[j] for j in np.flatnonzero(row > 0)] for row in scores]

    def gold_logits(self, task: EncodedTask) -> np.ndarray:
        return np.where(np.asarray(task.eval_targets) > 0, 1.0, -1.0)

    def trivial(self, task: EncodedTask) -> tuple[str, np.ndarray]:
        frequent = np.asarray(task.train_targets).mean(axis=0) > 0.5
        chosen = [name for name, on in zip(task.label_names, frequent) if on]
        logits = np.tile(np.where(frequent, 1.0, -1.0), (len(task.eval_targets), 1))
        return f"every class held by most training examples ({', '.join(chosen) or 'none'})", logits


MULTI_LABEL = MultiLabelFamily()

__all__ = ["MULTI_LABEL", "MultiLabelFamily"]
