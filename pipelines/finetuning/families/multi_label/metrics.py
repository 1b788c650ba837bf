"""Multi-label classification's metrics: micro- and macro-F1 and subset accuracy, and the eval loss
(numpy, by scikit-learn's definitions: _sequence/metrics.py says why)."""

from __future__ import annotations

import numpy as np

from .._sequence.metrics import f1_from_counts


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


__all__ = ["multi_label_metrics"]
