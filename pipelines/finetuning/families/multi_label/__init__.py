"""Multi-label classification of a text or text pair (any number of classes per row): its label
sets (labels.py), its metrics (metrics.py), fine-tuning on it (training.py) and its use on
unlabelled rows (inference.py), both over _sequence/."""

from ...family import Family
from .._sequence import ARCHITECTURE, KEYS, OUTPUTS, claims

FAMILY = Family(
    name="multi_label",
    metrics=("micro_f1", "macro_f1", "subset_accuracy"),
    architecture=ARCHITECTURE,
    outputs=OUTPUTS,
    training=f"{__name__}.training:MULTI_LABEL",
    keys=(*KEYS, "label_delimiter"),
    reads_depths=True,
    inference=f"{__name__}.inference:INFERENCE",
    unrecorded=claims("multi_label_classification"),
)
