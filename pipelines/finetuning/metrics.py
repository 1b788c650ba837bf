"""Evaluation metrics from logits: accuracy, macro-F1 and MCC (scikit-learn) for classification,
Pearson and Spearman (scipy) for regression; the eval loss for both."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _correlation(fn, predictions: np.ndarray, targets: np.ndarray) -> float:
    # A constant prediction (or target) has no defined correlation: it scores 0, not NaN, so a
    # scheduler can rank it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(fn(predictions, targets).statistic)
    return value if math.isfinite(value) else 0.0


def compute_metrics(task: str, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
    """`logits` [N, num_labels] (regression: [N, 1]); `targets` class ids or floats [N]."""
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets)
    if task == "regression":
        predictions = logits[:, 0]
        return {
            "eval_loss": float(np.mean((predictions - targets) ** 2)),
            "pearson": _correlation(stats.pearsonr, predictions, targets),
            "spearman": _correlation(stats.spearmanr, predictions, targets),
        }
    predictions = logits.argmax(axis=1)
    labels = list(range(num_labels))
    return {
        "eval_loss": float(-_log_softmax(logits)[np.arange(len(targets)), targets].mean()),
        "accuracy": float(accuracy_score(targets, predictions)),
        "macro_f1": float(f1_score(targets, predictions, labels=labels, average="macro", zero_division=0)),
        "mcc": float(matthews_corrcoef(targets, predictions)),
    }


__all__ = ["CLASSIFICATION_METRICS", "REGRESSION_METRICS", "compute_metrics"]
