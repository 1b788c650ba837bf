"""train.health: what pretraining watches at every step and validation pass, and what it does about it
(pipelines/train/health.py acts on these)."""

from __future__ import annotations

from typing import ClassVar

from pydantic.dataclasses import dataclass

from .base import STRICT, Section

SPIKE_POLICIES = ("warn", "skip", "rollback")


@dataclass(config=STRICT)
class HealthSection(Section):
    """Training health: non-finite steps skipped, rollbacks, loss spikes, validation collapse, the plateau."""

    SECTION: ClassVar[str] = "train.health"

    enabled: bool = True
    """Check every step and every validation pass. Under spike_policy=warn a step is read one step late
    (no wait for the device) and a non-finite one is skipped on the device; skip and rollback read each
    step before its update (the host waits for the device once per step)."""
    max_skipped_in_a_row: int = 3
    """Non-finite steps (loss or gradient norm NaN/inf on any worker) skipped in a row before a rollback."""
    rollback_lr_factor: float = 0.5
    """After a rollback for non-finite steps the learning rate is scaled by this (again at each one)."""
    max_rollbacks: int = 3
    """Rollbacks a run may make; one more stops it with an error that says what happened."""
    spike_window: int = 100
    """Recent training losses the spike band is computed from (median and median absolute deviation)."""
    spike_threshold: float = 6.0
    """A step's loss is a spike above median + this x 1.4826 x MAD of the window (and 5% above the median)."""
    validation_drop: float = 0.5
    """A validation MLM accuracy below (1 - this) x the run's best so far is a collapse."""
    spike_policy: str = "warn"
    """What a spike or collapse does: warn (an event), skip (the step is not applied) or rollback."""
    plateau_after_steps: int = 1000
    """Steps after warm-up at which validation MLM accuracy must have left the unigram plateau."""
    plateau_margin: float = 0.01
    """Accuracy above the unigram baseline (always the most frequent masked token) that counts as off the plateau."""

    def __post_init__(self) -> None:
        self.require("max_skipped_in_a_row", self.max_skipped_in_a_row >= 1, "must be >= 1")
        self.require("rollback_lr_factor", 0 < self.rollback_lr_factor <= 1, "must be in (0, 1]")
        self.require("max_rollbacks", self.max_rollbacks >= 0, "must be >= 0")
        self.require("spike_window", self.spike_window >= 8, "must be >= 8")
        self.require("spike_threshold", self.spike_threshold > 0, "must be > 0")
        self.require("validation_drop", 0 < self.validation_drop < 1, "must be in (0, 1)")
        self.require("spike_policy", self.spike_policy in SPIKE_POLICIES, f"must be one of {', '.join(SPIKE_POLICIES)}")
        self.require("plateau_after_steps", self.plateau_after_steps >= 0, "must be >= 0")
        self.require("plateau_margin", self.plateau_margin >= 0, "must be >= 0")


__all__ = ["SPIKE_POLICIES", "HealthSection"]
