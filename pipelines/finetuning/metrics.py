"""Evaluation metrics from logits: accuracy, macro-F1 and MCC for classification, and for two
classes the F1 of the second (GLUE's F1 for MRPC and QQP, of their positive class "1"), Pearson and
Spearman for regression, micro- and macro-F1 and subset accuracy for multi-label classification;
the eval loss for each.

Computed with numpy from counts, by scikit-learn's and scipy's definitions (`zero_division=0`,
multiclass MCC from the confusion matrix, Spearman as Pearson of tie-averaged ranks): importing
`sklearn.metrics` (which imports `scipy.stats`) took 1-2 s of every Tune trial process's start, a
third of it. tests/pipelines/finetuning/test_metrics.py checks every value equal to scikit-learn's
and scipy's on random and degenerate inputs."""

from __future__ import annotations

import math
import warnings

import numpy as np

CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "mcc")
REGRESSION_METRICS = ("pearson", "spearman")
MULTI_LABEL_METRICS = ("micro_f1", "macro_f1", "subset_accuracy")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; 0 (not NaN) where it is undefined (a constant side), so a scheduler can rank it."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(np.dot(x, y) / np.sqrt(np.dot(x, x) * np.dot(y, y)))
    return min(max(value, -1.0), 1.0) if math.isfinite(value) else 0.0


def average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span (scipy's rankdata "average")."""
    a = np.asarray(a)
    order = np.argsort(a, kind="mergesort")
    inverse = np.empty(len(a), dtype=np.intp)
    inverse[order] = np.arange(len(a))
    ordered = a[order]
    starts = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = starts.cumsum()[inverse]
    bounds = np.r_[np.nonzero(starts)[0], len(a)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    return pearson(average_ranks(x), average_ranks(y))


def f1_from_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    """F1 = 2tp / (2tp + fp + fn), 0 where nothing was predicted or true (zero_division=0)."""
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


def matthews(targets: np.ndarray, predictions: np.ndarray, num_labels: int) -> float:
    """The multiclass Matthews correlation (Gorodkin's R_K) from the confusion matrix; 0 where
    undefined (one class predicted or true throughout)."""
    confusion = np.zeros((num_labels, num_labels), dtype=np.float64)
    np.add.at(confusion, (targets, predictions), 1)
    true, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, total = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((total**2 - predicted @ predicted) * (total**2 - true @ true))
    return float((correct * total - true @ predicted) / denominator) if denominator > 0 else 0.0


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
    tp = (predictions & targets).sum(axis=0)
    fp = (predictions & (1 - targets)).sum(axis=0)
    fn = ((1 - predictions) & targets).sum(axis=0)
    return {
        "eval_loss": float(loss.mean()) if loss.size else 0.0,
        "micro_f1": float(f1_from_counts(tp.sum(), fp.sum(), fn.sum())),
        "macro_f1": float(f1_from_counts(tp, fp, fn).mean()),
        "subset_accuracy": float((predictions == targets).all(axis=1).mean()),
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
            "pearson": pearson(predictions, targets),
            "spearman": spearman(predictions, targets),
        }
    predictions = logits.argmax(axis=1)
    targets = targets.astype(np.int64)
    classes = np.arange(num_labels)[:, None]
    tp = ((predictions == classes) & (targets == classes)).sum(axis=1)
    fp = ((predictions == classes) & (targets != classes)).sum(axis=1)
    fn = ((predictions != classes) & (targets == classes)).sum(axis=1)
    f1 = f1_from_counts(tp, fp, fn)
    metrics = {
        "eval_loss": float(-_log_softmax(logits)[np.arange(len(targets)), targets].mean()),
        "accuracy": float(np.mean(predictions == targets)),
        "macro_f1": float(f1.mean()),
        "mcc": matthews(targets, predictions, num_labels),
    }
    if num_labels == 2:
        # The class names are sorted, so GLUE's positive class "1" is class id 1.
        metrics["f1"] = float(f1[1])
    return metrics


__all__ = [
    "CLASSIFICATION_METRICS",
    "MULTI_LABEL_METRICS",
    "REGRESSION_METRICS",
    "compute_metrics",
    "multi_label_metrics",
]
