"""Regression's metrics, checked against values worked out by hand, and equal to scipy's (which
the product does not import: see _sequence/metrics.py) on random, tied and constant inputs."""

import math

import numpy as np
import pytest

from pipelines.finetuning.families.regression.metrics import regression_metrics


def test_constant_predictions_score_zero_correlation():
    m = regression_metrics(np.ones((4, 1)), np.array([0.0, 1.0, 2.0, 3.0]))
    assert m["pearson"] == 0.0 and m["spearman"] == 0.0


def test_regression_known_values():
    predictions = np.array([[1.0], [2.0], [3.0], [5.0]])
    targets = np.array([1.0, 3.0, 2.0, 4.0])
    m = regression_metrics(predictions, targets)
    # ranks (1,2,3,4) vs (1,3,2,4): rho = 1 - 6*2/(4*15) = 0.8
    assert m["spearman"] == pytest.approx(0.8)
    # x - mean = (-1.75,-0.75,0.25,2.25), y - mean = (-1.5,0.5,-0.5,1.5)
    cov, vx, vy = 2.625 - 0.375 - 0.125 + 3.375, 3.0625 + 0.5625 + 0.0625 + 5.0625, 5.0
    assert m["pearson"] == pytest.approx(cov / math.sqrt(vx * vy))
    assert m["eval_loss"] == pytest.approx((0 + 1 + 1 + 1) / 4)


def _scipy(logits, targets):
    from scipy import stats

    if len(targets) < 2:  # scipy refuses; ours scores an undefined correlation 0
        return {"pearson": 0.0, "spearman": 0.0}
    with np.errstate(all="ignore"):
        values = [stats.pearsonr(logits[:, 0], targets).statistic, stats.spearmanr(logits[:, 0], targets).statistic]
    return dict(zip(("pearson", "spearman"), (v if math.isfinite(v) else 0.0 for v in values)))


def _cases():
    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 50, 400):
        targets = rng.normal(size=n)
        yield rng.normal(size=(n, 1)), targets
        yield np.round(rng.normal(size=(n, 1)), 0), np.round(targets)  # ties
        yield np.ones((n, 1)), targets  # constant: undefined, scored 0


def test_every_metric_equals_scipys():
    checked = 0
    for logits, targets in _cases():
        ours = regression_metrics(logits, targets)
        for name, value in _scipy(logits, targets).items():
            assert ours[name] == pytest.approx(float(value), abs=1e-12), (name, logits.shape)
            checked += 1
    assert checked == 30
