"""Classification's metrics from logits: accuracy, macro-F1 and MCC, and for two classes the F1 of
the second (GLUE's F1 for MRPC and QQP, of their positive class "1"); the eval loss (numpy, by
scikit-learn's definitions: _sequence/metrics.py says why)."""

from __future__ import annotations

import numpy as np

from .._sequence.metrics import f1_from_counts


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def matthews(targets: np.ndarray, predictions: np.ndarray, num_labels: int) -> float:
    """The multiclass Matthews correlation (Gorodkin's R_K) from the confusion matrix; 0 where
    undefined (one class predicted or true throughout)."""
    confusion = np.zeros((num_labels, num_labels), dtype=np.float64)
    np.add.at(confusion, (targets, predictions), 1)
    true, predicted = confusion.sum(axis=1), confusion.sum(axis=0)
    correct, total = np.trace(confusion), confusion.sum()
    denominator = np.sqrt((total**2 - predicted @ predicted) * (total**2 - true @ true))
    return float((correct * total - true @ predicted) / denominator) if denominator > 0 else 0.0


def classification_metrics(logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
    """`logits` [N, num_labels], `targets` class ids [N]. Two classes also score `f1`: a reported
    metric, not a tune.metric."""
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets)
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


__all__ = ["classification_metrics", "matthews"]
