"""What the sequence families' metrics share: F1 from counts (classification's per class,
multi-label's per class and over all).

Every sequence metric is computed with numpy from counts, by scikit-learn's and scipy's definitions
(`zero_division=0`, multiclass MCC from the confusion matrix, Spearman as Pearson of tie-averaged
ranks): importing `sklearn.metrics` (which imports `scipy.stats`) took 1-2 s of every Tune trial
process's start, a third of it. Each family's test_metrics.py checks its values equal to
scikit-learn's and scipy's on random and degenerate inputs."""

from __future__ import annotations

import numpy as np


def f1_from_counts(tp: np.ndarray, fp: np.ndarray, fn: np.ndarray) -> np.ndarray:
    """F1 = 2tp / (2tp + fp + fn), 0 where nothing was predicted or true (zero_division=0)."""
    denominator = 2 * tp + fp + fn
    return np.where(denominator > 0, 2 * tp / np.maximum(denominator, 1), 0.0)


__all__ = ["f1_from_counts"]
