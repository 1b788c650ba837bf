"""Classification of a text or text pair (a table's label column, or the embedded BBC News
articles): its metrics (metrics.py), fine-tuning on it (training.py) and its use on unlabelled rows
(inference.py), both over _sequence/."""

from ...family import Family
from .._sequence import ARCHITECTURE, KEYS, OUTPUTS, claims

FAMILY = Family(
    name="classification",
    metrics=("accuracy", "macro_f1", "mcc"),
    architecture=ARCHITECTURE,
    outputs=OUTPUTS,
    training=f"{__name__}.training:CLASSIFICATION",
    keys=KEYS,
    reads_depths=True,
    inference=f"{__name__}.inference:INFERENCE",
    unrecorded=claims("single_label_classification"),
)
