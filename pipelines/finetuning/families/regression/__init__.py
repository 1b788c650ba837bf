"""Regression of a number from a text or text pair (a table's numeric label column): its metrics
(metrics.py), fine-tuning on it (training.py) and its use on unlabelled rows (inference.py), both
over _sequence/."""

from ...family import Family
from .._sequence import ARCHITECTURE, KEYS, OUTPUTS, claims

FAMILY = Family(
    name="regression",
    metrics=("pearson", "spearman"),
    architecture=ARCHITECTURE,
    outputs=OUTPUTS,
    training=f"{__name__}.training:REGRESSION",
    keys=KEYS,
    reads_depths=True,
    inference=f"{__name__}.inference:INFERENCE",
    unrecorded=claims("regression"),
)
