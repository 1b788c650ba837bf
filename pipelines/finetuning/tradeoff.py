"""What depth buys, measured where the distill stage has everything at hand: the teacher, its
distilled student and the teacher under early exit at a few settings, each scored on the same eval
features with the family's metric and timed over them on this process's CPU threads (the model's
forward and the batching of already-tokenized rows: what depth changes; tokenizing, which no depth
shortens, is left out and said so). The report's trade-off table and figure read the result."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from albert_model.depths import ExitRule

from ..config import FinetuneSection
from .family import EncodedTask, TaskFamily
from .loop import predict

ROUNDS = 3
"""Timed passes per arm, taken in turn (a change in the machine's load falls on every arm); each
arm's fastest counts, after one untimed pass each."""


@dataclass(frozen=True)
class Arm:
    """One way of answering: a model at its depth, or under an early-exit rule."""

    name: str
    model: nn.Module
    layers: int
    """Applications of the shared layer the model has (its num_hidden_layers)."""
    rule: ExitRule | None = None


def measure(
    cfg: FinetuneSection, family: TaskFamily, task: EncodedTask, pad_id: int, arms: Sequence[Arm], rounds: int = ROUNDS
) -> list[dict]:
    """Per arm: its metrics on `task`'s eval features, the mean depth its rows were answered at, and
    eval rows per second (the fastest of `rounds` passes) on this process's torch threads."""
    from ..inference.predictor import EarlyExit

    runs = [arm.model if arm.rule is None else EarlyExit(arm.model, arm.rule) for arm in arms]

    def answer(i: int) -> np.ndarray:
        with torch.inference_mode():
            return predict(
                runs[i],
                task.eval,
                cfg.eval_batch_size,
                pad_id,
                scores_of=(lambda out: out) if arms[i].rule is not None else family.scores,
                collate_fn=family.collate,
            )

    scores = [answer(i) for i in range(len(arms))]  # the untimed pass: allocations, caches
    best = [float("inf")] * len(arms)
    for _ in range(rounds):
        for i in range(len(arms)):
            start = time.perf_counter()
            answer(i)
            best[i] = min(best[i], time.perf_counter() - start)
    found = []
    for arm, out, seconds in zip(arms, scores, best):
        depths = out[:, -1] if arm.rule is not None else np.full(len(out), arm.layers)
        logits = out[:, :-1] if arm.rule is not None else out
        found.append(
            {
                "name": arm.name,
                "layers": arm.layers,
                "exit_rule": None if arm.rule is None else {"patience": arm.rule.patience, "entropy": arm.rule.entropy},
                "metrics": family.evaluate(cfg, task, logits).metrics,
                "mean_depth": float(np.mean(depths)) if len(depths) else float(arm.layers),
                "rows_per_s": len(task.eval) / seconds if seconds > 0 else None,
            }
        )
    return found


__all__ = ["ROUNDS", "Arm", "measure"]
