"""A sequence family's task: train and eval examples from a table (or the embedded BBC News
articles), their targets and class names as the family reads its label column, and the account of
every input row (used, rejected with a reason, or left out by a subsample cap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ....config import FinetuneSection
from ....errors import BadInput
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


def _require_rows(examples: Examples, cfg: FinetuneSection) -> None:
    if not len(examples):
        raise BadInput(
            f"{examples.source}: no usable rows in column {cfg.text_column!r} / {cfg.label_column!r} "
            f"(of {examples.read} rows, rejected: {dict(examples.rejected)})"
        )


def _cap(examples: Examples, cap: int | None, cfg: FinetuneSection, stratify: bool) -> tuple[Examples, int]:
    if cap is None or cap >= len(examples):
        return examples, 0
    return examples.select(sample_indices(examples, cap, cfg.seed, stratify)), len(examples) - cap


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
    """Read, split, subsample and encode the configured task. Splits and subsamples are stratified
    by class where the family says so (classification: a multi-label row has several classes)."""
    stratify = family.stratified
    source = family.embedded(cfg) if cfg.train_path is None else read_table_of(cfg, cfg.train_path, family.numeric)
    _require_rows(source, cfg)
    sources = [source]
    if cfg.eval_path is None:
        train_idx, eval_idx = split_indices(source, cfg.eval_fraction, cfg.seed, stratify=stratify)
        train, evaluation = source.select(train_idx), source.select(eval_idx)
        eval_from = f"{cfg.eval_fraction:g} of {source.source} (seed {cfg.seed}" + (
            ", stratified)" if stratify else ")"
        )
        if not len(train) or not len(evaluation):
            raise BadInput(
                f"{source.source}: {len(source)} usable rows are too few to hold out "
                f"finetune.eval_fraction={cfg.eval_fraction:g}"
            )
    else:
        train = source
        evaluation = read_table_of(cfg, cfg.eval_path, family.numeric)
        _require_rows(evaluation, cfg)
        sources.append(evaluation)
        eval_from = cfg.eval_path
    train, train_unsampled = _cap(train, cfg.max_train_examples, cfg, stratify)
    evaluation, eval_unsampled = _cap(evaluation, cfg.max_eval_examples, cfg, stratify)
    names, train_targets, eval_targets = family.targets(cfg, train, evaluation)
    accounting = {
        "inputs": [s.summary() for s in sources],
        "eval_from": eval_from,
        "train": {"used": len(train), "unsampled": train_unsampled},
        "eval": {"used": len(evaluation), "unsampled": eval_unsampled},
    }
    return Task(train, evaluation, train_targets, eval_targets, names, accounting)


__all__ = ["LabelColumn", "Task", "load_task", "refuse_embedded"]
