"""The fine-tuning task families by `finetune.task`, one line each. A family is its folder here
(families/<name>/, whose __init__.py declares its Family: family.py) and its line below; what
names families elsewhere derives from FAMILIES: the config's checks (checks.py), the metrics a
search may rank by, the keys only some families read (fingerprints), the export class and ONNX
outputs (pipelines/export/onnx.py) and the docs' table of families (reference.py). Importing this
imports no family's training code (nor torch): task_family does, for a trial."""

from __future__ import annotations

from ...config import Config
from ..family import Family, TaskFamily
from . import classification, multi_label, multiple_choice, question_answering, regression, token_classification

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        classification.FAMILY,
        regression.FAMILY,
        multi_label.FAMILY,
        token_classification.FAMILY,
        multiple_choice.FAMILY,
        question_answering.FAMILY,
    )
}


def task_family(task: str) -> TaskFamily:
    """The fine-tuning of `finetune.task`'s family (an entry point has checked the name: checks.py)."""
    return FAMILIES[task].load_training()


def tune_metrics() -> tuple[str, ...]:
    """Every family's tune.metric choices, each once, in the families' order."""
    return tuple(dict.fromkeys(metric for family in FAMILIES.values() for metric in family.metrics))


def tune_metric(config: Config) -> str:
    """The metric the search maximises: tune.metric, or the task's first."""
    return config.tune.metric or FAMILIES[config.finetune.task].metrics[0]


def unread_keys(task: str) -> set[str]:
    """The finetune keys (`finetune.KEY`) that some family reads and `task`'s does not: they change
    none of its results."""
    own = FAMILIES[task].keys if task in FAMILIES else ()
    return {f"finetune.{key}" for family in FAMILIES.values() for key in family.keys if key not in own}


__all__ = ["FAMILIES", "task_family", "tune_metric", "tune_metrics", "unread_keys"]
