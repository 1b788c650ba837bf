"""Fault injection for the tests, kept out of the product: nothing in pipelines/ knows about it.

A test describes its faults as `Faults` and they are installed, by monkeypatching, in the process
that runs the pretraining loop:
- on the plain gloo processes of the loop tests, by the test's process function (`install`);
- on Ray Train workers, through Ray Train's own hook for extra callbacks: the environment variable
  RAY_TRAIN_CALLBACKS names `InjectFaults` (tests/ray_faults.py, apart so that the plain processes
  do not import Ray Train), a worker callback that Ray Train builds where the
  TorchTrainer is made (it reads the faults from FAULTS_ENV there) and runs on every worker before
  the training function (`Faults.env()` gives both variables, for `monkeypatch.setenv` or a job's
  environment).

What each fault does:
- `nan_steps` / `spike_steps`: the last rank's loss at these steps is NaN / 100 times larger, once
  per step (a replay after a rollback computes it clean), by scaling the loss sums train_step reads;
- `skip_steps`: the training health monitor starts with these batches to skip (a run that skips a
  batch by construction, to compare a rollback's replay with);
- `crash_after`: on a Ray Train worker, the last rank exits hard after each of these steps, before
  reporting it, once per step (files `crash_marker.<step>` remember them across the restarts);
- `hold_after`: on Ray Train workers, every rank waits after these steps, once per run, for the test
  to change the cluster under the worker group (files `held_at_<step>` / `release_<step>` in the
  output folder).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist

FAULTS_ENV = "ALBERT_TESTS_FAULTS"
CALLBACKS_ENV = "RAY_TRAIN_CALLBACKS"  # Ray Train builds the classes it names (comma-separated)
CALLBACK = "tests.ray_faults.InjectFaults"  # there: importing Ray Train costs every loop process ~2 s
HOLD_S = 300
HEALTH_CHECK_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"  # how often Ray Train's controller polls its workers


@dataclass(frozen=True)
class Faults:
    nan_steps: tuple[int, ...] = ()
    spike_steps: tuple[int, ...] = ()
    skip_steps: tuple[int, ...] = ()
    crash_after: tuple[int, ...] = ()
    crash_marker: str = ""
    hold_after: tuple[int, ...] = ()

    def env(self) -> dict[str, str]:
        """The environment that installs these faults on the Ray Train workers of a run started there."""
        return {CALLBACKS_ENV: CALLBACK, FAULTS_ENV: json.dumps(dataclasses.asdict(self))}

    @classmethod
    def from_env(cls) -> Faults:
        fields = json.loads(os.environ.get(FAULTS_ENV, "{}"))
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def rank_and_world() -> tuple[int, int]:
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


@contextlib.contextmanager
def scaled_loss(factor: float) -> Iterator[None]:
    """While it lasts, train_step's loss sums (masked LM and sentence order) are multiplied by
    `factor` on this process: its loss, and so its gradients, are NaN or a spike."""
    from pipelines.train import step

    original = step.pretraining_sums

    def scaled(*args, **kwargs):
        sums = original(*args, **kwargs)
        return dataclasses.replace(sums, mlm_ce=sums.mlm_ce * factor, sop_ce=sums.sop_ce * factor)

    step.pretraining_sums = scaled
    try:
        yield
    finally:
        step.pretraining_sums = original


def install(faults: Faults) -> None:
    """Patch this process's loop (and, on a Ray Train worker, its reports) to inject `faults`."""
    from pipelines.train import loop

    if faults.nan_steps or faults.spike_steps:
        train_step, injected = loop.train_step, set()

        def faulty_train_step(model, optimizer, scheduler, micro_batches, *args, **kwargs):
            number = scheduler.last_epoch + 1  # the step about to be taken (the schedule counts them)
            rank, world = rank_and_world()
            if rank != world - 1 or number in injected or number not in (*faults.nan_steps, *faults.spike_steps):
                return train_step(model, optimizer, scheduler, micro_batches, *args, **kwargs)
            injected.add(number)
            with scaled_loss(float("nan") if number in faults.nan_steps else 100.0):
                return train_step(model, optimizer, scheduler, micro_batches, *args, **kwargs)

        loop.train_step = faulty_train_step

    if faults.skip_steps:
        monitor = loop.HealthMonitor

        def skipping_monitor(health, train, *args, **kwargs):
            made = monitor(health, train, *args, **kwargs)
            made.skip_steps |= set(faults.skip_steps)
            return made

        loop.HealthMonitor = skipping_monitor

    if faults.crash_after or faults.hold_after:
        _patch_reports(faults)


def _patch_reports(faults: Faults) -> None:
    """Act after a step's report (its metrics line or checkpoint; not a health event's report)."""
    from pipelines.stages.pretrain import RayTrainIO

    report = RayTrainIO.report

    def faulty_report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        step, event = metrics["step"], "event" in metrics
        if not event and step in faults.crash_after and self.rank == self.world - 1:
            crash(f"{faults.crash_marker}.{step}")
        report(self, metrics, checkpoint_dir)
        if not event and step in faults.hold_after:
            hold(self.plan.out_dir, step, self.rank)

    RayTrainIO.report = faulty_report


def crash(marker: str) -> None:
    """Exit hard, once (the marker file remembers). It first waits for Ray Train's controller to poll
    the earlier reports: a checkpoint reported but not yet registered when a worker dies is not
    resumed from."""
    if not os.path.exists(marker):
        with open(marker, "w"):
            pass
        time.sleep(2.5 * float(os.environ.get(HEALTH_CHECK_ENV, 2.0)))
        os._exit(1)


def hold(out_dir: str, step: int, rank: int) -> None:
    """Wait after `step`, once per run, until Ray Train stops this worker group (the test changed the
    cluster under it), the test writes `release_<step>` into the output, or HOLD_S pass. Rank 0
    writes `held_at_<step>` once every rank has looked for it."""
    from pipelines.storage import exists, join, write_text

    held, release = join(out_dir, f"held_at_{step}"), join(out_dir, f"release_{step}")
    if exists(held):
        return
    torch.distributed.barrier()
    if rank == 0:
        write_text(held, "")
    deadline = time.monotonic() + HOLD_S
    while time.monotonic() < deadline and not exists(release):
        time.sleep(0.5)


__all__ = ["CALLBACK", "FAULTS_ENV", "Faults", "install", "scaled_loss"]
