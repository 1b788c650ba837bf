"""The task one fine-tuning run learns: train and eval examples, targets, class names, and the
account of every input row (used, rejected with a reason, or left out by a subsample cap)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config import FinetuneSection
from ..config.tuning import MULTI_LABEL
from ..errors import BadInput
from .labels import encode_label_sets, encode_labels, label_names, label_set, multi_label_names
from .tables import BBC_NEWS, Examples, bbc_news_examples, sample_indices, split_indices, table_examples


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


def read_table_of(cfg: FinetuneSection, path: str, regression: bool) -> Examples:
    """A table's examples with the task's columns (finetune.text_column, ... , column_names)."""
    return table_examples(
        path,
        cfg.text_column,
        cfg.label_column,
        cfg.text_pair_column,
        regression=regression,
        column_names=cfg.column_names,
    )


def load_task(cfg: FinetuneSection) -> Task:
    """Read, split, subsample and encode the configured task. Splits and subsamples are stratified
    by class for classification; a multi-label row has several classes, so there they are not."""
    classification = cfg.task == "classification"
    regression = cfg.task == "regression"
    if cfg.train_path is None:
        if cfg.text_pair_column or not classification:
            raise BadInput(
                f"the embedded BBC News task ({BBC_NEWS}) is single-text classification: set "
                f"finetune.train_path for finetune.task={cfg.task} or finetune.text_pair_column"
            )
        source = bbc_news_examples()
    else:
        source = read_table_of(cfg, cfg.train_path, regression)
    _require_rows(source, cfg)
    sources = [source]
    if cfg.eval_path is None:
        train_idx, eval_idx = split_indices(source, cfg.eval_fraction, cfg.seed, stratify=classification)
        train, evaluation = source.select(train_idx), source.select(eval_idx)
        eval_from = f"{cfg.eval_fraction:g} of {source.source} (seed {cfg.seed}" + (
            ", stratified)" if classification else ")"
        )
        if not len(train) or not len(evaluation):
            raise BadInput(
                f"{source.source}: {len(source)} usable rows are too few to hold out "
                f"finetune.eval_fraction={cfg.eval_fraction:g}"
            )
    else:
        train = source
        evaluation = read_table_of(cfg, cfg.eval_path, regression)
        _require_rows(evaluation, cfg)
        sources.append(evaluation)
        eval_from = cfg.eval_path
    train, train_unsampled = _cap(train, cfg.max_train_examples, cfg, classification)
    evaluation, eval_unsampled = _cap(evaluation, cfg.max_eval_examples, cfg, classification)
    names = None
    if classification:
        names = label_names(train)
        if len(names) < 2:
            raise BadInput(
                f"{train.source}: column {cfg.label_column!r} has a single class ({names[0]!r}) "
                f"in the training examples; classification needs two or more"
            )
        train_targets = encode_labels(train, names, cfg.label_column)
        eval_targets = encode_labels(evaluation, names, cfg.label_column)
    elif cfg.task == MULTI_LABEL:
        train_sets, eval_sets = ([label_set(v, cfg.label_delimiter) for v in e.labels] for e in (train, evaluation))
        names = multi_label_names(train_sets)
        if not names:
            raise BadInput(
                f"{train.source}: column {cfg.label_column!r} holds no class in the training examples "
                f"(finetune.task={MULTI_LABEL} reads lists, or text split at {cfg.label_delimiter!r})"
            )
        train_targets = encode_label_sets(train, train_sets, names, cfg.label_column)
        eval_targets = encode_label_sets(evaluation, eval_sets, names, cfg.label_column)
    else:
        train_targets, eval_targets = list(train.labels), list(evaluation.labels)
    accounting = {
        "inputs": [s.summary() for s in sources],
        "eval_from": eval_from,
        "train": {"used": len(train), "unsampled": train_unsampled},
        "eval": {"used": len(evaluation), "unsampled": eval_unsampled},
    }
    return Task(train, evaluation, train_targets, eval_targets, names, accounting)


__all__ = ["Task", "load_task"]
