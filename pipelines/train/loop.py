"""The pretraining loop, free of Ray: build the model (activation checkpointing, compile, FSDP2),
start from a checkpoint, step through the global batches, log, validate, checkpoint and export.

Its host supplies the data and takes the reports through a small interface (LoopIO): the Ray Train
worker in pipelines/stages/pretrain.py, or a plain process (the tests run it on 2 gloo processes).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh

from ..storage import join, write_text
from ..tracking import Trackers, open_trackers, pretrain_scalars
from .build import build_model, build_optimizer
from .checkpoint import (
    Snapshot,
    load_checkpoint,
    restore_snapshot,
    save_checkpoint,
    set_schedule_lr,
    take_snapshot,
)
from .export import export
from .health import APPLY, Action, HealthMonitor, StepCheck, Verdict, describe
from .input import SliceReader
from .loader import BatchSource, TrainSplit, loader_batches, mean_width, to_device
from .metrics import MetricsWindow, peak_flops, progress_line, validation_line
from .parallel import apply_ac, apply_compile, apply_fsdp
from .plan import METRICS, PretrainPlan, read_metrics
from .schedule import build_scheduler
from .step import PendingMetrics, train_step
from .validation import Validation


@dataclass(frozen=True)
class StartPoint:
    """A checkpoint to start from."""

    directory: str
    """A local folder holding it."""
    source: str
    """Where it came from (for the log and the metrics)."""
    event: str
    """resumed (this run's own checkpoint) or continued (a complete output's); the loop records a
    resume on another number of workers than the checkpoint's as resized."""


class LoopIO(Protocol):
    """What the loop needs from its host."""

    def start_point(self) -> contextlib.AbstractContextManager[StartPoint | None]:
        """The checkpoint to start from, as a local folder while the context lasts; None to start fresh."""

    def train_split(self) -> TrainSplit:
        """Where this rank reads its share of each global batch (rows [r*B/W, (r+1)*B/W) of a
        global batch that is the same for any number of ranks W)."""

    def validation_batches(self) -> Iterable[pa.Table]:
        """Whole evaluation batches (micro batch x world rows), the same on every rank."""

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        """Metrics (and a checkpoint folder this rank wrote), called on every rank at once."""


def build_training(plan: PretrainPlan, world: int, device: torch.device):
    """The model (sharded over `world` ranks), its optimizer and its schedule.

    One fp32 rank trains the plain module, as torchtitan does without data parallelism: FSDP2 over
    one rank computes the same numbers through DTensor dispatch (the CPU learning recipe's step:
    53 ms wrapped, 46 ms plain). bf16 keeps FSDP2 on one rank too, its MixedPrecisionPolicy being
    how this project computes in bf16. Checkpoints are the same DCP layout either way, so a run
    resumes on any number of ranks."""
    train = plan.train
    model = build_model(plan.albert, train.init_from, train.seed, plan.sentence_objective != "none").to(device)
    if train.activation_checkpointing:
        apply_ac(model)
    if train.compile:
        apply_compile(model)
    if world > 1 or plan.precision == "bf16":
        apply_fsdp(model, init_device_mesh(device.type, (world,)), torch.bfloat16 if plan.precision == "bf16" else None)
    optimizer = build_optimizer(model, train.optimizer, train.lr, train.weight_decay)
    return model, optimizer, build_scheduler(optimizer, train.warmup_steps, train.max_steps)


@dataclass(frozen=True)
class QueuedStep:
    """A step queued on the device whose verdict the loop has not acted on yet."""

    step: int
    pending: PendingMetrics
    width: float
    """Its micro-batches' mean width (the metrics window's FLOPs)."""
    verdict: Verdict | None
    """Known before its update (no health, or checked then); None: read when settled."""


@dataclass(frozen=True)
class Parts:
    """What one rank's loop works with, the same from its first step to its last."""

    plan: PretrainPlan
    rank: int
    world: int
    device: torch.device
    io: LoopIO
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    health: HealthMonitor | None
    validation: Validation
    source: BatchSource
    processes: int
    """Loader processes: 0 (a thread) or 1."""
    reader: SliceReader | None
    """A thread's reader, reused across rollbacks (the footers read once); a process makes its own."""
    trackers: Trackers
    """Rank 0's experiment trackers (none elsewhere, or with tracking off)."""

    @property
    def deferred(self) -> bool:
        """Under the warn policy a step is checked one step late: the host reads step k's loss while
        the device runs step k + 1, and a non-finite step was already skipped on the device (the same
        rule the check applies). The skip and rollback spike policies decide before the update: one
        host read per step. A rollback found late restores the same checkpoint state."""
        return self.health is not None and self.plan.train.health.spike_policy == "warn"


@dataclass
class LoopState:
    """What the loop changes as it goes."""

    step: int
    """Optimizer steps taken (queued on the device)."""
    records: list[dict]
    """The lines of metrics.jsonl (rank 0 writes them)."""
    window: MetricsWindow
    batches: Iterator[list[dict[str, torch.Tensor]]] | None
    snapshot: Snapshot | None
    """The latest checkpoint's state in memory: where a rollback goes (training health only)."""
    started: float
    queued: list[QueuedStep] = field(default_factory=list)
    tracked: int = 0
    """How many of `records` the trackers have had."""


def resume(io: LoopIO, model, optimizer, scheduler, rank: int, world: int, max_steps: int) -> tuple[int, dict, dict]:
    """Load the start point's checkpoint, if any: (its step, the metrics line's event, what it saved)."""
    step, event, saved = 0, {"event": "started"}, {}
    with io.start_point() as start:
        if start is not None:
            saved = load_checkpoint(start.directory, model, optimizer, scheduler)
            step, before = saved["step"], saved.get("world_size", world)
            # a resume on another worker count: an elastic resize, a lost node, or a rerun on other resources
            name = "resized" if start.event == "resumed" and before != world else start.event
            event = {"event": name, "checkpoint": start.source, **({"from_workers": before} if before != world else {})}
    if step > max_steps:  # the lifecycle resumes only runs that have not passed max_steps
        raise RuntimeError(f"{event.get('checkpoint')} is at step {step}, past train.max_steps={max_steps}")
    if start is not None and rank == 0:
        workers = f" on {world} workers (was {event['from_workers']})" if "from_workers" in event else ""
        where = f"{start.source} at step {step} of {max_steps}{workers}"
        print(f"pretrain: {event['event']} from {where}", flush=True)
    return step, event, saved


def batches_from(parts: Parts, first: int) -> Iterator[list[dict[str, torch.Tensor]]]:
    """This rank's micro-batches of every step from step `first` on."""
    pin = parts.device.type == "cuda"
    return loader_batches(parts.source, first, parts.processes, pin=pin, reader=parts.reader)


def record(parts: Parts, state: LoopState, event: dict) -> None:
    """A health event: metrics.jsonl, the log, and a report (the dashboard), on every rank at once."""
    state.records.append(event)
    if parts.rank == 0:
        print(f"pretrain: {describe(event)}", flush=True)
    parts.io.report({"step": event["step"], "event": event["event"], "health": describe(event)}, None)


def train_and_check(parts: Parts, state: LoopState) -> Verdict:
    """Queue the next step, then settle the queued steps: all of them but, when deferred, the newest
    at a step that neither logs, validates nor checkpoints."""
    train, health = parts.plan.train, parts.health
    micro_batches = next(state.batches)
    width = mean_width(micro_batches)
    micro_batches = [to_device(mb, parts.device) for mb in micro_batches]
    check = StepCheck(health, state.step + 1) if health is not None and not parts.deferred else None
    pending = train_step(
        parts.model, parts.optimizer, parts.scheduler, micro_batches, train.max_grad_norm, check,
        guard=parts.deferred, skip=parts.deferred and state.step + 1 in health.skip_steps,
    )  # fmt: skip
    state.step += 1
    step, known = state.step, check.verdict if check is not None else APPLY  # no health: every step applies
    state.queued.append(QueuedStep(step, pending, width, None if parts.deferred else known))
    due = any(step % every == 0 for every in (train.log_every, train.eval_every, train.checkpoint_every))
    due = due or step == train.max_steps
    return settle(parts, state, keep=1 if parts.deferred and not due else 0)


def settle(parts: Parts, state: LoopState, keep: int) -> Verdict:
    """Act on the verdicts of the queued steps but the newest `keep`, oldest first (reading those
    not read yet): record each event, put each applied or skipped step in the metrics window. Stops
    at a rollback; returns the last verdict (APPLY when there was none)."""
    verdict = APPLY
    while len(state.queued) > keep:
        queued = state.queued.pop(0)
        verdict = queued.verdict
        if verdict is None:
            metrics = queued.pending.get()
            verdict = parts.health.check_step(queued.step, metrics.loss, metrics.grad_norm)
        if verdict.event is not None:
            record(parts, state, verdict.event)
        if verdict.action is Action.ROLLBACK:
            return verdict
        state.window.add(queued.pending, queued.width, applied=verdict.action is Action.APPLY)
    return verdict


def log_window(parts: Parts, state: LoopState) -> dict:
    """The metrics line of the steps since the last one, at a logging step (else {})."""
    train, step = parts.plan.train, state.step
    if step % train.log_every and step != train.max_steps:
        return {}
    report = state.window.summary(step, parts.device)
    state.window.reset()
    state.records.append(report)
    if parts.rank == 0:
        print(f"pretrain: {progress_line(report, train.max_steps, time.perf_counter() - state.started)}", flush=True)
    return report


def validate(parts: Parts, state: LoopState, final: bool = False) -> tuple[dict, Verdict]:
    """A validation pass: its line in metrics.jsonl and the log, then training health's verdict on
    it, its events recorded. Returns the pass's numbers and the verdict."""
    result, step = parts.validation.run(parts.model, parts.device), state.step
    state.records.append({"step": step, "split": "validation", **result, **({"final": True} if final else {})})
    if parts.rank == 0:
        print(f"pretrain: {validation_line(step, result)}", flush=True)
    if parts.health is None:
        return result, APPLY
    action, events = parts.health.check_validation(step, result, parts.validation.baseline)
    for event in events:
        record(parts, state, event)
    return result, Verdict(action, events[0] if events else None)


def as_report(result: dict) -> dict:
    """A validation pass's numbers as a report's keys."""
    return {f"validation_{k}": v for k, v in result.items()}


def roll_back(parts: Parts, state: LoopState, trigger: dict) -> None:
    """Back to the latest checkpoint's state, the batches read again from its step on; the events
    say what happened. Past train.health.max_rollbacks, TrainingDiverged stops the run instead."""
    health, scheduler, snapshot = parts.health, parts.scheduler, state.snapshot
    factor = health.rolled_back(trigger)
    restore_snapshot(snapshot, parts.model, parts.optimizer, scheduler)
    if factor != 1.0:
        scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
        set_schedule_lr(parts.optimizer, scheduler)
    event = {
        "event": "rollback",
        "step": trigger["step"],
        "to_step": snapshot.step,
        "reason": trigger.get("reason") or trigger["event"],
        "rollbacks": health.rollbacks,
        "lr_scale": scheduler.base_lrs[0] / parts.plan.train.lr,
        "skip_steps": sorted(health.skip_steps),
    }
    record(parts, state, event)
    state.window.reset()
    state.queued.clear()
    state.batches.close()
    state.batches = batches_from(parts, snapshot.step)
    state.step = snapshot.step


def save(parts: Parts, state: LoopState, report: dict) -> Snapshot | None:
    """A checkpoint of this step, handed to the host with the report; training health keeps its
    state in memory too (the next rollback's target)."""
    model, optimizer, scheduler, health = parts.model, parts.optimizer, parts.scheduler, parts.health
    with tempfile.TemporaryDirectory() as directory:
        extra = {"health": health.state()} if health is not None else None
        save_checkpoint(directory, model, optimizer, scheduler, state.step, extra)
        parts.io.report({"step": state.step, **report}, directory)
    return take_snapshot(model, optimizer, scheduler, state.step) if health is not None else None


def write_metrics(parts: Parts, state: LoopState) -> None:
    """Rank 0: metrics.jsonl, rewritten whole, and its new lines to the trackers."""
    if parts.rank == 0:
        write_text(join(parts.plan.out_dir, METRICS), "".join(json.dumps(r) + "\n" for r in state.records))
        for record in state.records[state.tracked :]:
            parts.trackers.log_metrics(pretrain_scalars(record), record["step"])
        state.tracked = len(state.records)


def pretrain_loop(plan: PretrainPlan, rank: int, world: int, device: torch.device, io: LoopIO) -> None:
    """Train from wherever `io` starts us to plan.train.max_steps; rank 0 writes metrics.jsonl,
    eval.json and the transformers export into plan.out_dir."""
    train = plan.train
    model, optimizer, scheduler = build_training(plan, world, device)
    health = HealthMonitor(train.health, train) if train.health.enabled else None
    step, event, saved = resume(io, model, optimizer, scheduler, rank, world, train.max_steps)
    records = read_metrics(join(plan.out_dir, METRICS), step) if rank == 0 else []
    records.append({"step": step, **event, "max_steps": train.max_steps, "num_workers": world})
    window = MetricsWindow(plan.albert, world, peak_flops(device, plan.precision, train.peak_tflops))
    validation, started = Validation(io.validation_batches, plan, rank, world, health is not None), time.perf_counter()
    snapshot = None
    if health is not None:
        health.restore(saved.get("health", {}))
        snapshot = take_snapshot(model, optimizer, scheduler, step)
    source = BatchSource(
        io.train_split(), train.global_batch_size, rank, world, train.micro_batch(world), plan.max_predictions,
        plan.masking, plan.batches_per_epoch,
    )  # fmt: skip
    processes = train.loader_processes if train.loader_processes is not None else int(device.type == "cuda")
    reader = source.reader() if processes == 0 and step < train.max_steps else None
    # a resumed run's trackers go on from its checkpoint's step (TensorBoard hides the redone steps' old events)
    tracking = plan.tracking if rank == 0 else None
    trackers = open_trackers(tracking, purge_step=step + 1 if step else None) if tracking else Trackers()
    parts = Parts(
        plan, rank, world, device, io, model, optimizer, scheduler, health, validation, source, processes, reader,
        trackers,
    )  # fmt: skip
    batches = batches_from(parts, step) if step < train.max_steps else None
    state = LoopState(step, records, window, batches, snapshot, started, tracked=len(records))

    while state.step < train.max_steps:
        verdict, report = train_and_check(parts, state), {}
        if verdict.action is not Action.ROLLBACK:  # a step rolled back neither logs nor validates
            report = log_window(parts, state)
            if state.step % train.eval_every == 0 and state.step != train.max_steps:  # the final pass follows
                result, verdict = validate(parts, state)
                report |= as_report(result)  # in place: a metrics line of this step takes them too
        if verdict.action is Action.ROLLBACK:
            roll_back(parts, state, verdict.event)
            continue
        if report:
            write_metrics(parts, state)
        if state.step % train.checkpoint_every == 0 or state.step == train.max_steps:
            state.snapshot = save(parts, state, report)
        elif report:
            io.report({"step": state.step, **report}, None)

    if state.batches is not None:
        state.batches.close()
    final, _ = validate(parts, state, final=True)  # a rollback is no longer possible: its events only
    write_metrics(parts, state)
    io.report({"step": state.step, **as_report(final)}, None)
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        export(plan, full, {"step": state.step, **final})
    trackers.close()  # on an error the driver ends the MLflow run; W&B ends its own at exit


__all__ = [
    "LoopIO",
    "StartPoint",
    "build_training",
    "pretrain_loop",
]
