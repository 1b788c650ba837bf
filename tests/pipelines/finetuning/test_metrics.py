"""Metrics from logits, checked against values worked out by hand, and equal to scikit-learn's and
scipy's (which the product does not import: see the module's docstring) on random and degenerate
inputs."""

import math

import numpy as np
import pytest

from pipelines.finetuning.metrics import compute_metrics


def one_hot_logits(predictions, num_labels):
    return np.eye(num_labels)[predictions] * 5.0


def test_binary_classification_known_values():
    # tp=2 fp=1 fn=1 tn=2: accuracy 4/6, F1 of each class 2/3, MCC (4-1)/sqrt(3*3*3*3) = 1/3
    targets = np.array([1, 1, 0, 0, 1, 0])
    m = compute_metrics("classification", one_hot_logits([1, 1, 1, 0, 0, 0], 2), targets, 2)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["macro_f1"] == pytest.approx(2 / 3)
    assert m["mcc"] == pytest.approx(1 / 3)


def test_eval_loss_is_mean_cross_entropy():
    logits = np.array([[0.0, math.log(3.0)], [0.0, 0.0]])  # p(1) = 3/4, then 1/2
    m = compute_metrics("classification", logits, np.array([1, 0]), 2)
    assert m["eval_loss"] == pytest.approx((-math.log(0.75) - math.log(0.5)) / 2)


def test_macro_f1_counts_a_never_predicted_class_as_zero():
    m = compute_metrics("classification", one_hot_logits([0, 0, 1, 1], 3), np.array([0, 0, 1, 2]), 3)
    # F1: class 0 = 1, class 1 = 2/3, class 2 = 0
    assert m["macro_f1"] == pytest.approx((1 + 2 / 3 + 0) / 3)
    assert m["accuracy"] == pytest.approx(0.75)


def test_constant_predictions_score_zero_mcc_and_correlation():
    assert compute_metrics("classification", one_hot_logits([0, 0, 0], 2), np.array([0, 1, 0]), 2)["mcc"] == 0.0
    m = compute_metrics("regression", np.ones((4, 1)), np.array([0.0, 1.0, 2.0, 3.0]), 1)
    assert m["pearson"] == 0.0 and m["spearman"] == 0.0


def test_regression_known_values():
    predictions = np.array([[1.0], [2.0], [3.0], [5.0]])
    targets = np.array([1.0, 3.0, 2.0, 4.0])
    m = compute_metrics("regression", predictions, targets, 1)
    # ranks (1,2,3,4) vs (1,3,2,4): rho = 1 - 6*2/(4*15) = 0.8
    assert m["spearman"] == pytest.approx(0.8)
    # x - mean = (-1.75,-0.75,0.25,2.25), y - mean = (-1.5,0.5,-0.5,1.5)
    cov, vx, vy = 2.625 - 0.375 - 0.125 + 3.375, 3.0625 + 0.5625 + 0.0625 + 5.0625, 5.0
    assert m["pearson"] == pytest.approx(cov / math.sqrt(vx * vy))
    assert m["eval_loss"] == pytest.approx((0 + 1 + 1 + 1) / 4)


def test_multi_label_known_values():
    # labels (a, b, c); predicted where the logit > 0
    targets = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
    logits = np.array([[2.0, -1.0, 3.0], [-2.0, 1.0, 1.0], [1.0, -3.0, -1.0], [-1.0, -1.0, -2.0]])
    m = compute_metrics("multi_label", logits, targets, 3)
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
    m = compute_metrics("multi_label", np.array([[800.0, -800.0]]), np.array([[1, 0]]), 2)
    assert m["eval_loss"] == pytest.approx(0.0) and math.isfinite(m["eval_loss"])
    wrong = compute_metrics("multi_label", np.array([[-800.0, 800.0]]), np.array([[1, 0]]), 2)
    assert wrong["eval_loss"] == pytest.approx(800.0)
    assert wrong["micro_f1"] == 0.0 and wrong["subset_accuracy"] == 0.0


def _sklearn_and_scipy(task, logits, targets, num_labels):
    from scipy import stats
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    if task == "regression":
        if len(targets) < 2:  # scipy refuses; ours scores an undefined correlation 0
            return {"pearson": 0.0, "spearman": 0.0}
        with np.errstate(all="ignore"):
            values = [stats.pearsonr(logits[:, 0], targets).statistic, stats.spearmanr(logits[:, 0], targets).statistic]
        return dict(zip(("pearson", "spearman"), (v if math.isfinite(v) else 0.0 for v in values)))
    if task == "multi_label":
        predictions = (logits > 0).astype(int)
        return {
            "micro_f1": f1_score(targets, predictions, average="micro", zero_division=0),
            "macro_f1": f1_score(targets, predictions, average="macro", zero_division=0),
            "subset_accuracy": accuracy_score(targets, predictions),
        }
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
            yield "classification", rng.normal(size=(n, k)), rng.integers(0, k, n), k
            yield "classification", one_hot_logits(np.zeros(n, dtype=int), k), rng.integers(0, k, n), k  # one class
            yield "classification", one_hot_logits(rng.integers(0, 2, n), k), rng.integers(0, 2, n), k  # classes unseen
            yield "multi_label", rng.normal(size=(n, k)), rng.integers(0, 2, (n, k)), k
            yield "multi_label", -np.ones((n, k)), np.zeros((n, k), dtype=int), k  # nothing true or predicted
        targets = rng.normal(size=n)
        yield "regression", rng.normal(size=(n, 1)), targets, 1
        yield "regression", np.round(rng.normal(size=(n, 1)), 0), np.round(targets), 1  # ties
        yield "regression", np.ones((n, 1)), targets, 1  # constant: undefined, scored 0


def test_every_metric_equals_scikit_learns_and_scipys():
    checked = 0
    for task, logits, targets, num_labels in _cases():
        ours = compute_metrics(task, logits, targets, num_labels)
        for name, value in _sklearn_and_scipy(task, logits, targets, num_labels).items():
            assert ours[name] == pytest.approx(float(value), abs=1e-12), (task, name, logits.shape)
            checked += 1
    assert checked > 150
