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
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh

from ..storage import join, write_text
from .build import build_model, build_optimizer
from .checkpoint import load_checkpoint, restore_snapshot, save_checkpoint, set_schedule_lr, take_snapshot
from .export import export
from .health import HealthMonitor, describe
from .loader import BatchSource, TrainSplit, loader_batches, mean_width, to_device
from .metrics import MetricsWindow, peak_flops, progress_line
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

    def crash(self) -> None:
        """Test-only fault injection: end this process as a crashed worker would."""

    def hold(self, step: int) -> None:
        """Test-only: wait after `step` for the test to change the cluster under the worker group."""


def build_training(plan: PretrainPlan, world: int, device: torch.device):
    """The model (sharded over `world` ranks), its optimizer and its schedule.

    One fp32 rank trains the plain module, as torchtitan does without data parallelism: FSDP2 over
    one rank computes the same numbers through DTensor dispatch (the CPU learning recipe's step:
    53 ms wrapped, 46 ms plain). bf16 keeps FSDP2 on one rank too, its MixedPrecisionPolicy being
    how this project computes in bf16. Checkpoints are the same DCP layout either way, so a run
    resumes on any number of ranks."""
    train = plan.train
    model = build_model(plan.albert, train.init_from, train.seed).to(device)
    if train.activation_checkpointing:
        apply_ac(model)
    if train.compile:
        apply_compile(model)
    if world > 1 or plan.precision == "bf16":
        apply_fsdp(model, init_device_mesh(device.type, (world,)), torch.bfloat16 if plan.precision == "bf16" else None)
    optimizer = build_optimizer(model, train.optimizer, train.lr, train.weight_decay)
    return model, optimizer, build_scheduler(optimizer, train.warmup_steps, train.max_steps)


def _write_metrics(path: str, records: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def _loss_factor(plan: PretrainPlan, step: int, rank: int, world: int, injected: set[int]) -> float | None:
    """Test-only: a NaN or a spike in the last rank's loss at the plan's steps, once per step."""
    if rank != world - 1 or step in injected or step not in (*plan.nan_steps, *plan.spike_steps):
        return None
    injected.add(step)
    return float("nan") if step in plan.nan_steps else 100.0


def pretrain_loop(plan: PretrainPlan, rank: int, world: int, device: torch.device, io: LoopIO) -> None:
    """Train from wherever `io` starts us to plan.train.max_steps; rank 0 writes metrics.jsonl,
    eval.json and the transformers export into plan.out_dir."""
    train = plan.train
    model, optimizer, scheduler = build_training(plan, world, device)
    health = HealthMonitor(train.health, train, set(plan.skip_steps)) if train.health.enabled else None
    step, event, saved = 0, {"event": "started"}, {}
    with io.start_point() as start:
        if start is not None:
            saved = load_checkpoint(start.directory, model, optimizer, scheduler)
            step, before = saved["step"], saved.get("world_size", world)
            # a resume on another worker count: an elastic resize, a lost node, or a rerun on other resources
            name = "resized" if start.event == "resumed" and before != world else start.event
            event = {"event": name, "checkpoint": start.source, **({"from_workers": before} if before != world else {})}
    if step > train.max_steps:  # the lifecycle resumes only runs that have not passed max_steps
        raise RuntimeError(f"{event.get('checkpoint')} is at step {step}, past train.max_steps={train.max_steps}")
    if start is not None and rank == 0:
        workers = f" on {world} workers (was {event['from_workers']})" if "from_workers" in event else ""
        where = f"{start.source} at step {step} of {train.max_steps}{workers}"
        print(f"pretrain: {event['event']} from {where}", flush=True)
    metrics_path = join(plan.out_dir, METRICS)
    records = read_metrics(metrics_path, step) if rank == 0 else []
    records.append({"step": step, **event, "max_steps": train.max_steps, "num_workers": world})
    window = MetricsWindow(plan.albert, world, peak_flops(device, plan.precision, train.peak_tflops))
    validation, started = Validation(io.validation_batches, plan, rank, world, health is not None), time.perf_counter()
    snapshot, decision, injected = None, {}, set()
    if health is not None:
        health.restore(saved.get("health", {}))
        snapshot = take_snapshot(model, optimizer, scheduler, step)

    def record(event: dict) -> None:
        """A health event: metrics.jsonl, the log, and a report (the dashboard), on every rank at once."""
        records.append(event)
        if rank == 0:
            print(f"pretrain: {describe(event)}", flush=True)
        io.report({"step": event["step"], "event": event["event"], "health": describe(event)}, None)

    def check(metrics) -> bool:
        action, event = health.check_step(step + 1, metrics.loss, metrics.grad_norm)
        decision.update(action=action, event=event)
        return action == "apply"

    def roll_back(event: dict) -> int:
        """Back to the latest checkpoint's state, the batches read again from its step on; returns
        that step. The events say what happened."""
        nonlocal batches
        factor = health.rolled_back(event)
        restore_snapshot(snapshot, model, optimizer, scheduler)
        if factor != 1.0:
            scheduler.base_lrs = [lr * factor for lr in scheduler.base_lrs]
            set_schedule_lr(optimizer, scheduler)
        record(
            {
                "event": "rollback",
                "step": event["step"],
                "to_step": snapshot.step,
                "reason": event.get("reason") or event["event"],
                "rollbacks": health.rollbacks,
                "lr_scale": scheduler.base_lrs[0] / train.lr,
                "skip_steps": sorted(health.skip_steps),
            }
        )
        window.reset()
        batches.close()
        batches = batches_from(snapshot.step)
        return snapshot.step

    def validate(report: dict, final: bool = False) -> dict:
        result = validation.run(model, device)
        records.append({"step": step, "split": "validation", **result, **({"final": True} if final else {})})
        if rank == 0:
            print(
                f"pretrain: step {step} validation: mlm_acc {result['mlm_accuracy']:.3f} "
                f"sop_acc {result['sop_accuracy']:.3f} mlm_loss {result['mlm_loss']:.3f} "
                f"sop_loss {result['sop_loss']:.3f}",
                flush=True,
            )
        report.update({f"validation_{k}": v for k, v in result.items()})
        return result

    source = BatchSource(
        io.train_split(), train.global_batch_size, rank, world, train.micro_batch(world), plan.max_predictions,
        plan.masking, plan.batches_per_epoch,
    )  # fmt: skip
    processes = train.loader_processes if train.loader_processes is not None else int(device.type == "cuda")
    # a thread reuses one reader across rollbacks (the footers read once); a process makes its own
    reader = source.reader() if processes == 0 and step < train.max_steps else None

    def batches_from(first: int):
        return loader_batches(source, first, processes, pin=device.type == "cuda", reader=reader)

    batches = batches_from(step) if step < train.max_steps else None
    # Under the warn policy a step is checked one step late: the host reads step k's loss while the
    # device runs step k + 1, and a non-finite step was already skipped on the device (the same rule
    # the check applies). The skip and rollback spike policies decide before the update: one host
    # read per step. A rollback found late restores the same checkpoint state.
    deferred = health is not None and train.health.spike_policy == "warn"
    unchecked: list[tuple[int, PendingMetrics, float]] = []  # (step, its PendingMetrics, its mean width)

    def settle(keep: int) -> bool:
        """Check the deferred steps but the newest `keep`; True after a rollback (the step is reset)."""
        nonlocal step
        while len(unchecked) > keep:
            checked, pending, width = unchecked.pop(0)
            metrics = pending.get()
            action, trouble = health.check_step(checked, metrics.loss, metrics.grad_norm)
            if trouble is not None:
                record(trouble)
            if action == "rollback":
                unchecked.clear()
                step = roll_back(trouble)
                return True
            window.add(pending, width, applied=action == "apply")
        return False

    while step < train.max_steps:
        micro_batches = next(batches)
        width = mean_width(micro_batches)
        micro_batches = [to_device(mb, device) for mb in micro_batches]
        factor = _loss_factor(plan, step + 1, rank, world, injected)
        pending = train_step(
            model, optimizer, scheduler, micro_batches, train.max_grad_norm,
            check if health is not None and not deferred else None, factor,
            guard=deferred, skip=deferred and step + 1 in health.skip_steps,
        )  # fmt: skip
        step += 1
        last = step == train.max_steps
        due = last or step % train.log_every == 0 or step % train.eval_every == 0 or step % train.checkpoint_every == 0
        if deferred:
            unchecked.append((step, pending, width))
            if settle(0 if due or step in plan.hold_steps or plan.fault_step == step else 1):
                continue
        else:
            action, trouble = decision.pop("action", "apply"), decision.pop("event", None)
            if trouble is not None:
                record(trouble)
            if action == "rollback":
                step = roll_back(trouble)
                continue
            window.add(pending, width, applied=action == "apply")
        if plan.fault_step == step and rank == world - 1:
            io.crash()
        report: dict = {}
        if step % train.log_every == 0 or last:
            report = window.summary(step, device)
            window.reset()
            records.append(report)
            if rank == 0:
                print(f"pretrain: {progress_line(report, train.max_steps, time.perf_counter() - started)}", flush=True)
        if step % train.eval_every == 0 and not last:  # the final pass follows the loop
            result = validate(report)
            if health is not None:
                verdict, events = health.check_validation(step, result, validation.baseline)
                for event in events:
                    record(event)
                if verdict == "rollback":
                    step = roll_back(events[0])
                    continue
        if report and rank == 0:
            _write_metrics(metrics_path, records)
        if step % train.checkpoint_every == 0 or last:
            with tempfile.TemporaryDirectory() as directory:
                extra = {"health": health.state()} if health is not None else None
                save_checkpoint(directory, model, optimizer, scheduler, step, extra)
                io.report({"step": step, **report}, directory)
            if health is not None:
                snapshot = take_snapshot(model, optimizer, scheduler, step)
        elif report:
            io.report({"step": step, **report}, None)
        if step in plan.hold_steps:
            io.hold(step)
    if batches is not None:
        batches.close()

    final_report: dict = {"step": step}
    final = validate(final_report, final=True)
    if health is not None:  # the final pass is checked too (a rollback is no longer possible: events only)
        for event in health.check_validation(step, final, validation.baseline)[1]:
            record(event)
    if rank == 0:
        _write_metrics(metrics_path, records)
    io.report(final_report, None)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        export(plan, state, {"step": step, **final})


__all__ = [
    "LoopIO",
    "StartPoint",
    "build_training",
    "pretrain_loop",
]
