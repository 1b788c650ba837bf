"""The ALBERT/BERT learning-rate schedule: linear warmup, then polynomial decay to 0."""

from __future__ import annotations

import torch


def albert_lr_factor(step: int, warmup_steps: int, total_steps: int, power: float = 1.0) -> float:
    """Multiplier of the peak learning rate at optimizer step `step` (0-based).

    As in the original `optimization.py`: the decay runs over all `total_steps` from step 0,
    and during warmup the rate is peak * step / warmup_steps instead.
    """
    if warmup_steps and step < warmup_steps:
        return step / warmup_steps
    return max(0.0, 1.0 - step / max(1, total_steps)) ** power


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: albert_lr_factor(step, warmup_steps, total_steps))
