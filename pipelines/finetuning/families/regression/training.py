"""Fine-tuning on regression: a number per text or text pair (a label that is no number is an error
naming its row), the mean squared error of the single logit, Pearson and Spearman (metrics.py), the
logit predicted."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ...distill_losses import squared_error_sum
from ...family import EncodedTask
from ...tables import Examples
from .._sequence.training import SequenceFamily
from . import FAMILY
from .metrics import regression_metrics


class RegressionFamily(SequenceFamily):
    model_class = FAMILY.model_class
    numeric = True

    def targets(self, cfg: FinetuneSection, train: Examples, evaluation: Examples) -> tuple[None, list, list]:
        return None, list(train.labels), list(evaluation.labels)

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(outputs.float()[:, 0], targets.float(), reduction="sum")  # in fp32 under bf16 autocast

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        return squared_error_sum(outputs, teacher)  # a number: no distribution to soften

    def metrics_of(self, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
        return regression_metrics(logits, targets)

    def predicted(self, scores: np.ndarray, names: list[str] | None) -> list[float]:
        return [float(row[0]) for row in scores]

    def gold_logits(self, task: EncodedTask) -> np.ndarray:
        return np.asarray(task.eval_targets, dtype=float)[:, None]

    def trivial(self, task: EncodedTask) -> tuple[str, None]:
        mean = float(np.mean(task.train_targets)) if len(task.train_targets) else 0.0
        return f"the training targets' mean ({mean:.4g}): a constant, whose correlation is undefined", None


REGRESSION = RegressionFamily()

__all__ = ["REGRESSION", "RegressionFamily"]
