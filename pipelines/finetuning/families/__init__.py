"""The fine-tuning task families by `finetune.task`: adding one is its module and a line here (and
its metrics in config/tuning.py's TUNE_METRICS, which validates tune.metric before any work)."""

from __future__ import annotations

from ..family import TaskFamily
from .classification.training import CLASSIFICATION
from .multi_label.training import MULTI_LABEL
from .multiple_choice.training import MULTIPLE_CHOICE_FAMILY
from .question_answering.training import QUESTION_ANSWERING
from .regression.training import REGRESSION
from .token_classification.training import TOKEN_CLASSIFICATION_FAMILY

FAMILIES: dict[str, TaskFamily] = {
    f.name: f
    for f in (
        CLASSIFICATION,
        REGRESSION,
        MULTI_LABEL,
        TOKEN_CLASSIFICATION_FAMILY,
        MULTIPLE_CHOICE_FAMILY,
        QUESTION_ANSWERING,
    )
}


def task_family(task: str) -> TaskFamily:
    """The family of `finetune.task` (the config has checked the name)."""
    return FAMILIES[task]


__all__ = ["FAMILIES", "task_family"]
