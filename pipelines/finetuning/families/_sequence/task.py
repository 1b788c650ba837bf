"""A sequence family's task: train and eval examples from a table (or the embedded BBC News
articles) through splits.py, their targets and class names as the family reads its label column,
and the account of every input row (used, rejected with a reason, or left out by a subsample cap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ....config import FinetuneSection
from ....errors import BadInput
from ...splits import Units, train_and_eval
from ...tables import BBC_NEWS, Examples, sample_indices, split_indices, table_examples


class LabelColumn(Protocol):
    """How a sequence family reads its label column (training.SequenceFamily's part that load_task uses)."""

    stratified: bool
    numeric: bool

    def embedded(self, cfg: FinetuneSection) -> Examples: ...

    def targets(self, cfg: FinetuneSection, train: Examples, evaluation: Examples) -> tuple[list[str] | None, Any, Any]:
        """(class names or None, train targets, eval targets) of the splits' labels."""


@dataclass
class Task:
    train: Examples
    eval: Examples
    train_targets: Any
    """Class ids (classification), floats (regression) or 0/1 rows [N, classes] (multi_label)."""
    eval_targets: list[Any]
    label_names: list[str] | None
    """Class names by id (by column for multi_label); None for regression."""
    accounting: dict[str, Any]

    @property
    def num_labels(self) -> int:
        return len(self.label_names) if self.label_names is not None else 1


def read_table_of(cfg: FinetuneSection, path: str, numeric: bool) -> Examples:
    """A table's examples with the task's columns (finetune.text_column, ... , column_names)."""
    return table_examples(
        path,
        cfg.text_column,
        cfg.label_column,
        cfg.text_pair_column,
        numeric=numeric,
        column_names=cfg.column_names,
    )


def refuse_embedded(cfg: FinetuneSection) -> Examples:
    """The embedded task is single-text classification: any other finetune.task or a text pair needs a file."""
    raise BadInput(
        f"the embedded BBC News task ({BBC_NEWS}) is single-text classification: set "
        f"finetune.train_path for finetune.task={cfg.task} or finetune.text_pair_column"
    )


def load_task(cfg: FinetuneSection, family: LabelColumn) -> Task:
    """Read, split and subsample the configured task (splits.train_and_eval) and its targets. Splits
    and subsamples are stratified by class where the family says so (classification: a multi-label
    row has several classes), and copies of a text stay on one side."""
    stratify = family.stratified
    splits = train_and_eval(
        cfg,
        Units(
            read=lambda path: read_table_of(cfg, path, family.numeric),
            held_out=lambda source, fraction, seed: split_indices(source, fraction, seed, stratify=stratify),
            sample=lambda chosen, k, seed: sample_indices(chosen, k, seed, stratify),
            unit="rows",
            where=f" in column {cfg.text_column!r} / {cfg.label_column!r}",
            held_out_as="{fraction:g} of {source} (seed {seed}" + (", stratified)" if stratify else ")"),
            embedded=lambda: family.embedded(cfg),
        ),
    )
    names, train_targets, eval_targets = family.targets(cfg, splits.train, splits.evaluation)
    return Task(splits.train, splits.evaluation, train_targets, eval_targets, names, splits.accounting)


__all__ = ["LabelColumn", "Task", "load_task", "refuse_embedded"]
