"""Regression's metrics: Pearson and Spearman correlation and the eval loss, the mean squared error
(numpy, by scipy's definitions: _sequence/metrics.py says why)."""

from __future__ import annotations

import math
import warnings

import numpy as np


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


def regression_metrics(logits: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """`logits` [N, 1] (the predicted numbers), `targets` floats [N]."""
    predictions = np.asarray(logits, dtype=np.float64)[:, 0]
    targets = np.asarray(targets)
    return {
        "eval_loss": float(np.mean((predictions - targets) ** 2)),
        "pearson": pearson(predictions, targets),
        "spearman": spearman(predictions, targets),
    }


__all__ = ["average_ranks", "pearson", "regression_metrics", "spearman"]
