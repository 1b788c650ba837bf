"""Evaluation metrics from logits: accuracy, macro-F1 and MCC (scikit-learn) for classification, and
for two classes the F1 of the second (GLUE's F1 for MRPC and QQP, of their positive class "1"),
Pearson and Spearman (scipy) for regression, micro- and macro-F1 and subset accuracy
(scikit-learn) for multi-label classification; the eval loss for each."""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")
MULTI_LABEL_METRICS = ("micro_f1", "macro_f1", "subset_accuracy")


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


def multi_label_metrics(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """`logits` and 0/1 `targets` [N, num_labels]; a label is predicted where its sigmoid passes 0.5
    (its logit > 0). eval_loss: binary cross-entropy averaged over examples and labels (torch's
    BCEWithLogitsLoss, and transformers' loss for problem_type="multi_label_classification").
    subset_accuracy: the share of examples whose whole label set is right."""
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets).astype(np.int64)
    predictions = (logits > 0).astype(np.int64)
    # log(1 + e^-|x|) + max(x, 0) - x*y: the numerically stable form of BCE on logits
    loss = np.logaddexp(0.0, -np.abs(logits)) + np.maximum(logits, 0.0) - logits * targets
    return {
        "eval_loss": float(loss.mean()) if loss.size else 0.0,
        "micro_f1": float(f1_score(targets, predictions, average="micro", zero_division=0)),
        "macro_f1": float(f1_score(targets, predictions, average="macro", zero_division=0)),
        "subset_accuracy": float(accuracy_score(targets, predictions)),
    }


def compute_metrics(task: str, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
    """`logits` [N, num_labels] (regression: [N, 1]); `targets` class ids or floats [N] (multi-label:
    0/1 [N, num_labels]). Two classes also score `f1`: a reported metric, not a tune.metric."""
    if task == "multi_label":
        return multi_label_metrics(logits, targets)
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
    metrics = {
        "eval_loss": float(-_log_softmax(logits)[np.arange(len(targets)), targets].mean()),
        "accuracy": float(accuracy_score(targets, predictions)),
        "macro_f1": float(f1_score(targets, predictions, labels=labels, average="macro", zero_division=0)),
        "mcc": float(matthews_corrcoef(targets, predictions)),
    }
    if num_labels == 2:
        # The class names are sorted, so GLUE's positive class "1" is class id 1.
        metrics["f1"] = float(f1_score(targets, predictions, labels=labels, pos_label=1, zero_division=0))
    return metrics


__all__ = [
    "CLASSIFICATION_METRICS",
    "MULTI_LABEL_METRICS",
    "REGRESSION_METRICS",
    "compute_metrics",
    "multi_label_metrics",
]
