"""Training health (train.health): what the loop checks at each step and validation pass, and the
decision it takes. Pure Python on numbers every rank has alike (the step's all-reduced loss and
gradient norm, the validation pass's all-reduced metrics), so every rank decides alike and no
replica diverges.

- A step whose loss or gradient norm is NaN/inf is skipped (no update; the schedule and the data
  move on); `max_skipped_in_a_row` of them in a row roll the run back to its latest checkpoint with
  the learning rate scaled by `rollback_lr_factor`.
- A loss above the robust band of the recent losses (median + threshold x 1.4826 x MAD, and 5%
  above the median) is a spike, a validation MLM accuracy below (1 - validation_drop) x the best
  a collapse: `spike_policy` warns, skips the step, or rolls back (the spiking batch is then
  skipped on the replay).
- `max_rollbacks` bounds the rollbacks; one more stops the run (TrainingDiverged).
- After warm-up plus `plateau_after_steps`, validation MLM accuracy within `plateau_margin` of the
  unigram baseline (always the most frequent masked token, counted on the validation split) is the
  plateau: a warning that names the numbers and the usual causes for this config.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from ..config.health import HealthSection
from ..config.sections import TrainSection
from .step import StepMetrics

HEALTH_EVENTS = ("skipped", "spike", "collapse", "rollback", "plateau", "note")
"""The `event` values of training health's lines in metrics.jsonl."""
# The paper's recipe: LAMB at a global batch of 4096 with peak lr 0.00176.
PAPER_BATCH, PAPER_LR = 4096, 0.00176
# What this project measured (docs/BENCHMARKS.md): SOP stays at ln 2 for the whole 3,000-step CPU
# recipe while MLM leaves its plateau; on a learnable synthetic order task it left after 158-600 steps.
SOP_NOTE = (
    "sentence-order accuracy {sop:.3f} is still at chance (loss {sop_loss:.3f}, ln 2 = 0.693) while masked-LM "
    "accuracy has left its plateau: expected early in a run, not an error. Measured here: SOP stays at ln 2 for "
    "all 3,000 steps of the CPU recipe (configs/learning-tiny.yaml) and left its plateau after 158 of 600 steps "
    "on a synthetic task whose order is learnable (docs/BENCHMARKS.md)"
)


def describe(event: dict) -> str:
    """One log line for a health event."""
    kind, step = event["event"], event["step"]
    if kind == "skipped":
        numbers = f" (loss {event['loss']}, grad norm {event['grad_norm']})" if "loss" in event else ""
        in_a_row = f", {event['in_a_row']} in a row" if "in_a_row" in event else ""
        return f"step {step} skipped: {event['reason']}{numbers}{in_a_row}"
    if kind == "spike":
        return (
            f"step {step} loss spike: {event['loss']:.3f} above the band's {event['limit']:.3f} "
            f"(median {event['median']:.3f}); policy {event['policy']}"
        )
    if kind == "collapse":
        return (
            f"step {step} validation collapse: MLM accuracy {event['mlm_accuracy']:.3f} against the best "
            f"{event['best_mlm_accuracy']:.3f}; policy {event['policy']}"
        )
    if kind == "rollback":
        return (
            f"step {step} rollback {event['rollbacks']} ({event['reason']}) to the checkpoint of step "
            f"{event['to_step']}; lr now x{event['lr_scale']:.3g} of train.lr"
            + (f", skipping the batches of steps {event['skip_steps']}" if event["skip_steps"] else "")
        )
    if kind == "plateau":
        return f"warning: {event['message']}"
    return f"step {step} {kind}: {event.get('message', '')}"


class Action(str, Enum):
    """What training health says to do with a step, or after a validation pass."""

    APPLY = "apply"
    SKIP = "skip"
    ROLLBACK = "rollback"


class Verdict(NamedTuple):
    """Training health's decision on a step, and the event that explains it (None: nothing to say)."""

    action: Action
    event: dict | None = None


APPLY = Verdict(Action.APPLY)


class TrainingDiverged(RuntimeError):
    """The run rolled back train.health.max_rollbacks times and needed another rollback."""


def _number(x: float) -> float | str:
    """JSON-safe: NaN and infinities as strings."""
    return x if math.isfinite(x) else str(x)


def plateau_causes(train: TrainSection) -> list[str]:
    """The usual reasons a run of this config stays on the unigram plateau."""
    causes = []
    batch, lr = train.global_batch_size, train.lr
    if train.optimizer == "lamb" and batch < 1024:
        causes.append(
            f"LAMB at a global batch of {batch}: its layer-wise trust ratio was made for batches of thousands "
            f"(the paper: {PAPER_BATCH} at lr {PAPER_LR}); at small batches AdamW leaves the plateau sooner "
            "(configs/learning-tiny.yaml: AdamW, batch 16, lr 0.001)"
        )
    scaled = PAPER_LR * math.sqrt(batch / PAPER_BATCH)  # LAMB's rule (You et al.): lr grows with sqrt(batch)
    if train.optimizer != "lamb":
        pass
    elif lr > 3 * scaled:
        causes.append(
            f"lr {lr} is high for a batch of {batch}: the paper's {PAPER_LR} at {PAPER_BATCH} scaled by "
            f"sqrt(batch / {PAPER_BATCH}) is {scaled:.2g}"
        )
    elif lr < scaled / 10:
        causes.append(f"lr {lr} is low for a batch of {batch} (the paper's rate scaled to it: {scaled:.2g})")
    if train.warmup_steps < 0.01 * train.max_steps:
        causes.append(
            f"warm-up of {train.warmup_steps} steps (under 1% of {train.max_steps}): a short warm-up stalls LAMB"
        )
    causes.append("too few steps yet for this model and batch: the plateau can last thousands of steps")
    return causes


@dataclass
class HealthMonitor:
    """The run's health state on one rank (the same on every rank)."""

    health: HealthSection
    train: TrainSection
    skip_steps: set[int] = field(default_factory=set)
    """Steps whose batch is skipped (a spike rollback's spiking batches)."""
    losses: deque = field(init=False)
    in_a_row: int = 0
    rollbacks: int = 0
    best_accuracy: float | None = None
    plateau_checked: bool = False

    def __post_init__(self) -> None:
        self.losses = deque(maxlen=self.health.spike_window)

    def check_step(self, step: int, loss: float, grad_norm: float) -> Verdict:
        """The verdict on step `step` (1-based) from its all-reduced loss and gradient norm."""
        if step in self.skip_steps:
            return Verdict(Action.SKIP, {"event": "skipped", "step": step, "reason": "batch skipped after a rollback"})
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self.in_a_row += 1
            what = "loss" if not math.isfinite(loss) else "gradient norm"
            event = {
                "event": "skipped",
                "step": step,
                "reason": f"non-finite {what}",
                "loss": _number(loss),
                "grad_norm": _number(grad_norm),
                "in_a_row": self.in_a_row,
            }
            if self.in_a_row >= self.health.max_skipped_in_a_row:
                return Verdict(Action.ROLLBACK, {**event, "rollback": "non-finite"})
            return Verdict(Action.SKIP, event)
        self.in_a_row = 0
        if len(self.losses) == self.losses.maxlen:
            median = statistics.median(self.losses)
            mad = statistics.median(abs(x - median) for x in self.losses)
            limit = max(median + self.health.spike_threshold * 1.4826 * mad, 1.05 * median)
            if loss > limit:
                policy = self.health.spike_policy
                event = {
                    "event": "spike",
                    "step": step,
                    "loss": loss,
                    "median": median,
                    "limit": limit,
                    "policy": policy,
                }
                return Verdict({"warn": Action.APPLY, "skip": Action.SKIP, "rollback": Action.ROLLBACK}[policy], event)
        self.losses.append(loss)
        return Verdict(Action.APPLY)

    def check_validation(self, step: int, result: dict, baseline: float | None) -> tuple[Action, list[dict]]:
        """(APPLY or ROLLBACK, the events) after the validation pass at `step`; `baseline`: the
        unigram baseline of the validation masks (None: not counted, no plateau check)."""
        accuracy, events, action = result["mlm_accuracy"], [], Action.APPLY
        if self.best_accuracy is not None and accuracy < (1 - self.health.validation_drop) * self.best_accuracy:
            policy = self.health.spike_policy
            events.append(
                {
                    "event": "collapse",
                    "step": step,
                    "mlm_accuracy": accuracy,
                    "best_mlm_accuracy": self.best_accuracy,
                    "policy": policy,
                }
            )
            action = Action.ROLLBACK if policy == "rollback" else Action.APPLY
        self.best_accuracy = max(accuracy, self.best_accuracy or accuracy)
        due = self.train.warmup_steps + self.health.plateau_after_steps
        if not self.plateau_checked and step >= due and baseline is not None:
            self.plateau_checked = True
            if accuracy <= baseline + self.health.plateau_margin:
                events.append(
                    {
                        "event": "plateau",
                        "step": step,
                        "mlm_accuracy": accuracy,
                        "unigram_baseline": baseline,
                        "message": (
                            f"validation MLM accuracy {accuracy:.3f} at step {step} is within "
                            f"{self.health.plateau_margin} of the unigram baseline {baseline:.3f} (always the "
                            f"most frequent masked token), {step - self.train.warmup_steps} steps after warm-up; usual "
                            "causes for this config: " + "; ".join(plateau_causes(self.train))
                        ),
                    }
                )
            elif result.get("sop_loss") is not None and abs(result["sop_loss"] - math.log(2)) < 0.01:
                events.append(
                    {
                        "event": "note",
                        "step": step,
                        "message": SOP_NOTE.format(sop=result["sop_accuracy"], sop_loss=result["sop_loss"]),
                    }
                )
        return action, events

    def rolled_back(self, event: dict) -> float:
        """Count a rollback (TrainingDiverged past max_rollbacks); the learning-rate factor to apply."""
        self.rollbacks += 1
        self.in_a_row = 0
        self.losses.clear()
        if self.rollbacks > self.health.max_rollbacks:
            raise TrainingDiverged(
                f"pretraining stopped at step {event['step']}: it needed rollback {self.rollbacks} "
                f"({event.get('reason') or event['event']}) but "
                f"train.health.max_rollbacks={self.health.max_rollbacks}; "
                "see the events in metrics.jsonl. Lower train.lr, raise train.warmup_steps, or check the data"
            )
        if event.get("rollback") == "non-finite":
            return self.health.rollback_lr_factor
        self.skip_steps.add(event["step"])  # a spike or collapse: the replay skips the spiking batch
        return 1.0

    def state(self) -> dict:
        """What a checkpoint keeps so that a restarted run goes on with the same decisions."""
        return {"skip_steps": sorted(self.skip_steps), "rollbacks": self.rollbacks, "best_accuracy": self.best_accuracy}

    def restore(self, state: dict) -> None:
        self.skip_steps |= set(state.get("skip_steps", []))
        self.rollbacks = state.get("rollbacks", self.rollbacks)
        self.best_accuracy = state.get("best_accuracy", self.best_accuracy)


class StepCheck:
    """train_step's `check` under the skip and rollback policies: the verdict on the step, taken on its
    metrics before its update, kept in `verdict` for the loop."""

    def __init__(self, health: HealthMonitor, step: int):
        self.health, self.step = health, step
        self.verdict: Verdict | None = None

    def __call__(self, metrics: StepMetrics) -> bool:
        self.verdict = self.health.check_step(self.step, metrics.loss, metrics.grad_norm)
        return self.verdict.action is Action.APPLY


__all__ = [
    "APPLY",
    "HEALTH_EVENTS",
    "Action",
    "HealthMonitor",
    "StepCheck",
    "TrainingDiverged",
    "Verdict",
    "describe",
    "plateau_causes",
]
