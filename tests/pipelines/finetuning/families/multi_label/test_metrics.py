"""Multi-label metrics, checked against values worked out by hand, and equal to scikit-learn's
(which the product does not import: see _sequence/metrics.py) on random and degenerate inputs."""

import math

import numpy as np
import pytest

from pipelines.finetuning.families.multi_label.metrics import multi_label_metrics


def test_multi_label_known_values():
    # labels (a, b, c); predicted where the logit > 0
    targets = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    logits = np.array([[2.0, -1.0, 3.0], [-2.0, 1.0, 1.0], [1.0, -3.0, -1.0], [-1.0, -1.0, -2.0]])
    m = multi_label_metrics(logits, targets)
    # micro: tp 4 (a0 c0 b1 a2), fp 1 (c1), fn 1 (b2): P 4/5, R 4/5, F1 4/5
    assert m["micro_f1"] == pytest.approx(0.8)
    # per label: a tp2 -> F1 1; b tp1 fn1 -> 2/3; c tp1 fp1 -> 2/3
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 2 / 3) / 3)
    assert m["subset_accuracy"] == pytest.approx(2 / 4)  # rows 0 and 3 exactly right
    z = logits.ravel()
    y = targets.ravel()
    bce = -(y * np.log(1 / (1 + np.exp(-z))) + (1 - y) * np.log(1 - 1 / (1 + np.exp(-z))))
    assert m["eval_loss"] == pytest.approx(bce.mean())


def test_multi_label_loss_is_stable_for_large_logits_and_a_label_never_present_scores_zero():
    m = multi_label_metrics(np.array([[800.0, -800.0]]), np.array([[1, 0]]))
    assert m["eval_loss"] == pytest.approx(0.0) and math.isfinite(m["eval_loss"])
    wrong = multi_label_metrics(np.array([[-800.0, 800.0]]), np.array([[1, 0]]))
    assert wrong["eval_loss"] == pytest.approx(800.0)
    assert wrong["micro_f1"] == 0.0 and wrong["subset_accuracy"] == 0.0


def _sklearn(logits, targets):
    from sklearn.metrics import accuracy_score, f1_score

    predictions = (logits > 0).astype(int)
    return {
        "micro_f1": f1_score(targets, predictions, average="micro", zero_division=0),
        "macro_f1": f1_score(targets, predictions, average="macro", zero_division=0),
        "subset_accuracy": accuracy_score(targets, predictions),
    }


def _cases():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 400):
        for k in (2, 3, 5):
            yield rng.normal(size=(n, k)), rng.integers(0, 2, (n, k))
            yield -np.ones((n, k)), np.zeros((n, k), dtype=int)  # nothing true or predicted


def test_every_metric_equals_scikit_learns():
    checked = 0
    for logits, targets in _cases():
        ours = multi_label_metrics(logits, targets)
        for name, value in _sklearn(logits, targets).items():
            assert ours[name] == pytest.approx(float(value), abs=1e-12), (name, logits.shape)
            checked += 1
    assert checked == 90
