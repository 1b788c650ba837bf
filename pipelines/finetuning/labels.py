"""Class names from the training labels, in a stable order, and labels as class ids (an unseen
class is an error)."""

from __future__ import annotations

from typing import Any

from ..errors import BadInput
from .tables import Examples


def label_name(value: Any) -> str:
    """A label as its class name: 1 in a csv and "1" in a jsonl are the same class."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value)


def sorted_names(names: set[str]) -> list[str]:
    """Classes in a stable order: numerically when all are integers."""
    if all(n.lstrip("-").isdigit() for n in names):
        return sorted(names, key=int)
    return sorted(names)


def label_names(train: Examples) -> list[str]:
    """The training labels' classes in a stable order: numerically when all are integers."""
    return sorted_names({label_name(v) for v in train.labels})


def encode_labels(examples: Examples, names: list[str], column: str) -> list[int]:
    """Class ids; a label the training data never had is an error naming the file, column and row."""
    ids = {name: i for i, name in enumerate(names)}
    unknown = [(row, label_name(v)) for row, v in zip(examples.rows, examples.labels) if label_name(v) not in ids]
    if unknown:
        shown = ", ".join(f"{name!r} (row {row})" for row, name in unknown[:5])
        raise BadInput(
            f"{examples.source}: column {column!r} has {len(unknown)} labels that never appear in the "
            f"training data: {shown}; the training classes are {', '.join(names)}"
        )
    return [ids[label_name(v)] for v in examples.labels]


__all__ = ["encode_labels", "label_name", "label_names", "sorted_names"]
