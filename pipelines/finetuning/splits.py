"""A family's train and eval units, the one way every family takes them: the training file read (or
the family's embedded task), the eval file read or a seeded share of the training one held out,
each capped by a seeded subsample, and the account of it all for the manifest's `examples` (per
input read/usable/rejected, per split used/unsampled, eval_from). The units are a table's rows,
sentences, questions: a family says how it reads, holds out and samples them (`Units`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..config import FinetuneSection
from ..errors import BadInput
from .tables import Accounted


@dataclass(frozen=True)
class Units:
    """How a family reads, holds out and subsamples its units."""

    read: Callable[[str], Accounted]
    """A file's units, each used or counted: an Accounted source with `select(indices)`."""
    held_out: Callable[[Any, float, int], tuple[list[int], list[int]]]
    """(source, fraction, seed) -> the (train, eval) indices of a seeded split holding out a share."""
    sample: Callable[[Any, int, int], list[int]]
    """(units, k, seed) -> the indices, in order, of a seeded subsample of k (fewer than there are)."""
    unit: str
    """What the units are, in errors: `sentences`."""
    where: str = ""
    """Where a file's units are, in the error for one without any (`in column 'text' / 'label'`)."""
    held_out_as: str = "{fraction:g} of {source} (seed {seed})"
    """The manifest's eval_from for a held-out share (a format of fraction, source and seed)."""
    embedded: Callable[[], Accounted] | None = None
    """The task without finetune.train_path; None: the family needs the file."""
    too_few: Callable[[Any], str] | None = None
    """What there are too few of to hold out a share, when not the usable units (question answering's contexts)."""


@dataclass(frozen=True)
class Splits:
    train: Any
    evaluation: Any
    sources: list[Accounted] = field(default_factory=list)
    """The files read (or the embedded task), the training one first."""
    accounting: dict[str, Any] = field(default_factory=dict)
    """The manifest's `examples`: per input read/usable/rejected, per split used/unsampled, eval_from."""


def _require(source: Accounted, units: Units) -> None:
    if not len(source):
        rejected = dict(source.rejected)
        raise BadInput(f"{source.source}: no usable {units.unit}{units.where} (of {source.read}, rejected: {rejected})")


def _cap(chosen: Any, cap: int | None, seed: int, units: Units) -> tuple[Any, int]:
    """A seeded subsample of `cap` units (all when None or as many as there are), and how many it left out."""
    if cap is None or cap >= len(chosen):
        return chosen, 0
    return chosen.select(units.sample(chosen, cap, seed)), len(chosen) - cap


def train_and_eval(cfg: FinetuneSection, units: Units) -> Splits:
    """finetune.train_path (or the embedded task) and eval_path, or a share of the training file held
    out (finetune.eval_fraction, seed), capped by finetune.max_train_examples and max_eval_examples."""
    if cfg.train_path is None and units.embedded is None:
        raise BadInput(f"finetune.task={cfg.task} has no embedded task: set finetune.train_path")
    source = units.embedded() if cfg.train_path is None else units.read(cfg.train_path)
    _require(source, units)
    sources = [source]
    if cfg.eval_path is None:
        train_idx, eval_idx = units.held_out(source, cfg.eval_fraction, cfg.seed)
        train, evaluation = source.select(train_idx), source.select(eval_idx)
        eval_from = units.held_out_as.format(fraction=cfg.eval_fraction, source=source.source, seed=cfg.seed)
        if not len(train) or not len(evaluation):
            what = units.too_few(source) if units.too_few else f"{len(source)} usable {units.unit}"
            raise BadInput(
                f"{source.source}: {what} are too few to hold out finetune.eval_fraction={cfg.eval_fraction:g}"
            )
    else:
        train, evaluation = source, units.read(cfg.eval_path)
        _require(evaluation, units)
        sources.append(evaluation)
        eval_from = cfg.eval_path
    train, train_unsampled = _cap(train, cfg.max_train_examples, cfg.seed, units)
    evaluation, eval_unsampled = _cap(evaluation, cfg.max_eval_examples, cfg.seed, units)
    accounting = {
        "inputs": [s.summary() for s in sources],
        "eval_from": eval_from,
        "train": {"used": len(train), "unsampled": train_unsampled},
        "eval": {"used": len(evaluation), "unsampled": eval_unsampled},
    }
    return Splits(train, evaluation, sources, accounting)


__all__ = ["Splits", "Units", "train_and_eval"]
