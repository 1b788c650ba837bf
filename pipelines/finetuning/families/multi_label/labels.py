"""A multi-label cell's classes (a list, or text split at finetune.label_delimiter), the training
rows' classes, and the label sets as 0/1 rows (an unseen class is an error)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ....errors import BadInput
from ...labels import label_name, sorted_names
from ...tables import Examples


def label_set(value: Any, delimiter: str) -> list[str]:
    """A multi-label cell as its classes, each once, in their first order: a list (jsonl, parquet)
    as it is, a text split at `delimiter` (blank parts dropped), any other value one class."""
    if isinstance(value, str):
        parts = [part.strip() for part in value.split(delimiter)]
    elif isinstance(value, Sequence | np.ndarray):
        parts = [label_name(v).strip() for v in value]
    else:
        parts = [label_name(value)]
    return list(dict.fromkeys(part for part in parts if part))


def multi_label_names(sets: list[list[str]]) -> list[str]:
    """Every class of the training rows' label sets, in a stable order."""
    return sorted_names({name for names in sets for name in names})


def encode_label_sets(examples: Examples, sets: list[list[str]], names: list[str], column: str) -> np.ndarray:
    """0/1 rows [N, len(names)] (float32, the BCE's targets); a class the training data never had is
    an error naming the file, column and row."""
    ids = {name: i for i, name in enumerate(names)}
    unknown = [(row, name) for row, labels in zip(examples.rows, sets) for name in labels if name not in ids]
    if unknown:
        shown = ", ".join(f"{name!r} (row {row})" for row, name in unknown[:5])
        raise BadInput(
            f"{examples.source}: column {column!r} has {len(unknown)} labels that never appear in the "
            f"training data: {shown}; the training classes are {', '.join(names)}"
        )
    targets = np.zeros((len(sets), len(names)), dtype=np.float32)
    for i, labels in enumerate(sets):
        targets[i, [ids[name] for name in labels]] = 1.0
    return targets


__all__ = ["encode_label_sets", "label_set", "multi_label_names"]
