"""A family's train and eval units from its files: the training file read, the eval file read or a
seeded share of the training one held out, each capped by a seeded subsample, and the account of it
all for the manifest (the families whose units are not table rows: token classification's
sentences, multiple choice's questions)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..config import FinetuneSection
from ..errors import BadInput


@dataclass(frozen=True)
class Splits:
    train: Any
    evaluation: Any
    accounting: dict[str, Any]
    """The manifest's `examples`: per input read/usable/rejected, per split used/unsampled, eval_from."""


def train_and_eval(
    cfg: FinetuneSection,
    read: Callable[[str], Any],
    split: Callable[[Any, float, int], tuple[list[int], list[int]]],
    sample: Callable[[Any, int | None, int], tuple[Any, int]],
    unit: str,
    held_out_by: str = "",
) -> Splits:
    """`read(path)` gives an Accounted source with `select(indices)`; `split(source, fraction, seed)`
    the held-out indices; `sample(units, k, seed)` a capped subsample and how many it left out.
    `unit` names the units in errors (`sentences`); `held_out_by` how the split groups them."""
    if cfg.train_path is None:
        raise BadInput(f"finetune.task={cfg.task} has no embedded task: set finetune.train_path")
    source = read(cfg.train_path)
    sources = [source]
    if not len(source):
        raise BadInput(f"{source.source}: no usable {unit} (of {source.read}, rejected: {dict(source.rejected)})")
    if cfg.eval_path is None:
        train_idx, eval_idx = split(source, cfg.eval_fraction, cfg.seed)
        train, evaluation = source.select(train_idx), source.select(eval_idx)
        eval_from = f"{cfg.eval_fraction:g} of {source.source} (seed {cfg.seed}{held_out_by})"
        if not len(train) or not len(evaluation):
            raise BadInput(
                f"{source.source}: {len(source)} usable {unit} are too few to hold out "
                f"finetune.eval_fraction={cfg.eval_fraction:g}"
            )
    else:
        train, evaluation = source, read(cfg.eval_path)
        sources.append(evaluation)
        eval_from = cfg.eval_path
        if not len(evaluation):
            raise BadInput(f"{evaluation.source}: no usable {unit} (rejected: {dict(evaluation.rejected)})")
    train, train_unsampled = sample(train, cfg.max_train_examples, cfg.seed)
    evaluation, eval_unsampled = sample(evaluation, cfg.max_eval_examples, cfg.seed)
    accounting = {
        "inputs": [s.summary() for s in sources],
        "eval_from": eval_from,
        "train": {"used": len(train), "unsampled": train_unsampled},
        "eval": {"used": len(evaluation), "unsampled": eval_unsampled},
    }
    return Splits(train, evaluation, accounting)


__all__ = ["Splits", "train_and_eval"]
