"""Regression of a number from a text or text pair (a table's numeric label column): its metrics
(metrics.py) and fine-tuning on it (training.py, over _sequence/)."""

from ...family import Family
from .._sequence import ARCHITECTURE, KEYS, OUTPUTS

FAMILY = Family(
    name="regression",
    metrics=("pearson", "spearman"),
    architecture=ARCHITECTURE,
    outputs=OUTPUTS,
    training=f"{__name__}.training:REGRESSION",
    keys=KEYS,
)
