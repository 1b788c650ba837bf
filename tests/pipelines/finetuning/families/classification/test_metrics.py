"""Classification's metrics from logits, checked against values worked out by hand, and equal to
scikit-learn's (which the product does not import: see _sequence/metrics.py) on random and
degenerate inputs."""

import math

import numpy as np
import pytest

from pipelines.finetuning.families.classification.metrics import classification_metrics


def one_hot_logits(predictions, num_labels):
    return np.eye(num_labels)[predictions] * 5.0


def test_binary_classification_known_values():
    # tp=2 fp=1 fn=1 tn=2: accuracy 4/6, F1 of each class 2/3, MCC (4-1)/sqrt(3*3*3*3) = 1/3
    targets = np.array([1, 1, 0, 0, 1, 0])
    m = classification_metrics(one_hot_logits([1, 1, 1, 0, 0, 0], 2), targets, 2)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["macro_f1"] == pytest.approx(2 / 3)
    assert m["mcc"] == pytest.approx(1 / 3)


def test_eval_loss_is_mean_cross_entropy():
    logits = np.array([[0.0, math.log(3.0)], [0.0, 0.0]])  # p(1) = 3/4, then 1/2
    m = classification_metrics(logits, np.array([1, 0]), 2)
    assert m["eval_loss"] == pytest.approx((-math.log(0.75) - math.log(0.5)) / 2)


def test_macro_f1_counts_a_never_predicted_class_as_zero():
    m = classification_metrics(one_hot_logits([0, 0, 1, 1], 3), np.array([0, 0, 1, 2]), 3)
    # F1: class 0 = 1, class 1 = 2/3, class 2 = 0
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert m["accuracy"] == pytest.approx(0.75)


def test_constant_predictions_score_zero_mcc():
    assert classification_metrics(one_hot_logits([0, 0, 0], 2), np.array([0, 1, 0]), 2)["mcc"] == 0.0


def _sklearn(logits, targets, num_labels):
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    predictions, labels = logits.argmax(axis=1), list(range(num_labels))
    expected = {
        "accuracy": accuracy_score(targets, predictions),
        "macro_f1": f1_score(targets, predictions, labels=labels, average="macro", zero_division=0),
        "mcc": matthews_corrcoef(targets, predictions),
    }
    if num_labels == 2:
        expected["f1"] = f1_score(targets, predictions, labels=labels, pos_label=1, zero_division=0)
    return expected


def _cases():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 400):
        for k in (2, 3, 5):
            yield rng.normal(size=(n, k)), rng.integers(0, k, n), k
            yield one_hot_logits(np.zeros(n, dtype=int), k), rng.integers(0, k, n), k  # one class
            yield one_hot_logits(rng.integers(0, 2, n), k), rng.integers(0, 2, n), k  # classes unseen


def test_every_metric_equals_scikit_learns():
    checked = 0
    for logits, targets, num_labels in _cases():
        ours = classification_metrics(logits, targets, num_labels)
        for name, value in _sklearn(logits, targets, num_labels).items():
            assert ours[name] == pytest.approx(float(value), abs=1e-12), (name, logits.shape)
            checked += 1
    assert checked == 150
