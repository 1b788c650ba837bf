"""What the three sequence families (classification, regression, multi-label: a label per text or
text pair, read from [CLS]) share; not a family of its own (its name starts with `_`): their head
and its output, the finetune keys they all read, how an export of their head that records no family
tells which one's it is, their fine-tuning (training.py, which each family's folder subclasses,
over task.py's reading of a table) and their inference (inference.py, likewise)."""

from collections.abc import Callable, Mapping
from typing import Any

ARCHITECTURE = "AlbertForSequenceClassification"
OUTPUTS = ("logits",)
"""Its logits are a sequence family's scores whatever the labels are (one class, several, a number)."""
KEYS = ("text_column", "text_pair_column", "label_column", "classifier_dropout", "column_names")
"""A table's columns and the dropout before the classifier: read by every sequence family, by no other."""


def problem_of(config: Mapping[str, Any]) -> str:
    """What a sequence export's config.json says it was fine-tuned for, in transformers' terms: its
    problem_type; else, as transformers infers it, a regression for a single label and a
    single-label classification otherwise."""
    problem_type = config.get("problem_type")
    if (
        problem_type != "multi_label_classification"
        and config.get("num_labels", len(config.get("id2label") or {})) == 1
    ):
        problem_type = "regression"
    return problem_type or "single_label_classification"


def claims(problem_type: str) -> Callable[[Mapping[str, Any]], bool]:
    """A Family's `unrecorded`: whether an export of the sequence head is one of `problem_type`'s."""
    return lambda config: problem_of(config) == problem_type
