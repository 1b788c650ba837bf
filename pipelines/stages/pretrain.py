"""`albert-ray pretrain`: ALBERT pretraining on Ray Train (FSDP2), from {run_dir}/data to
{run_dir}/pretrain/. This module is the Ray wiring only: the driver plans the run
(pipelines/train/plan.py: every check before a worker starts) and starts a TorchTrainer whose
thin worker hands the pure loop (pipelines/train/loop.py) its share of the data stage's parquet
(read with pyarrow: pipelines/train/input.py), Ray Train checkpoints and reports. A failed worker restarts
from the latest checkpoint (FailureConfig); a re-run of an unfinished run resumes from it (on any
number of workers: DCP reshards); a raised `train.max_steps` continues the complete output from
its last checkpoint.

Output layout (documented in docs/pretraining.md): `train/checkpoint_*/` (DCP checkpoints, the newest few
kept), `metrics.jsonl` (a line per log step, per validation pass and per start, resume or
continuation), `eval.json`, `hf/` (the transformers export), `config.yaml`, `manifest.json` (last).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator

import pyarrow.fs as pafs
import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from ..config import config_to_dict
from ..errors import BadInput
from ..rundir.lifecycle import StageRun, stage_runner
from ..storage import arrow_filesystem, exists, join, path_inside
from ..tracking import flat_params
from ..train.input import ordered_batches
from ..train.loader import TrainSplit
from ..train.loop import StartPoint, pretrain_loop
from ..train.plan import PretrainPlan, manifest_fields
from .pretrain_plan import check_resolved, continuation, plan_pretraining
from .ray_runtime import (
    check_train_snapshot,
    fixed_room,
    gpu_capacity,
    init_ray,
    keep_ray_info_off_the_console,
    quiet_train_run,
)
from .stage_tracking import start_tracking

CHECKPOINTS = "train"  # Ray Train's run name: checkpoints live in {run_dir}/pretrain/train/
# Ray 2.60 fills the dashboard's Train view (runs, attempts, resizes, workers, their logs) only with this set.
STATE_TRACKING_ENV = "RAY_TRAIN_ENABLE_STATE_TRACKING"


class RayTrainIO:
    """The loop's host on a Ray Train worker: the data splits, Ray Train's checkpoints and reports."""

    def __init__(self, plan: PretrainPlan, rank: int, world: int):
        self.plan, self.rank, self.world = plan, rank, world

    @contextlib.contextmanager
    def start_point(self) -> Iterator[StartPoint | None]:
        checkpoint, event = ray.train.get_checkpoint(), "resumed"  # this run's own latest
        if checkpoint is None and self.plan.initial_checkpoint:  # the complete output this run continues
            fs, path = arrow_filesystem(self.plan.initial_checkpoint)
            checkpoint, event = Checkpoint(path, filesystem=fs), "continued"
        if checkpoint is None:
            yield None
            return
        with checkpoint.as_directory() as directory:
            yield StartPoint(directory, checkpoint.path, event)

    def train_split(self) -> TrainSplit:
        return TrainSplit(join(self.plan.data_dir, "train"), self.plan.train.seed)

    def validation_batches(self):
        batch = self.plan.train.micro_batch(self.world) * self.world
        return ordered_batches(join(self.plan.data_dir, "validation"), batch)

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        ray.train.report(metrics, checkpoint=Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir else None)


def train_worker(loop_config: dict) -> None:
    """The Ray Train worker: wiring around pipelines/train/loop.py. `loop_config["plan"]`: the
    frozen PretrainPlan (Ray Train wants a dict here)."""
    plan: PretrainPlan = loop_config["plan"]
    context = ray.train.get_context()
    keep_ray_info_off_the_console()
    # Ray sets OMP_NUM_THREADS to the worker's whole reserved CPUs (1 for a 1-CPU worker, even on
    # a machine where nothing else computes while it trains): torch_threads says otherwise.
    torch.set_num_threads(plan.train.torch_threads or max(1, int(plan.train.cpus_per_worker)))
    device = ray.train.torch.get_device() if plan.use_gpu else torch.device("cpu")
    rank, world = context.get_world_rank(), context.get_world_size()
    pretrain_loop(plan, rank, world, device, RayTrainIO(plan, rank, world))


def check_cpu_workers(workers: int, cpus: float) -> None:
    """On a cluster that nothing adds nodes to, the CPU workers a run starts with (train.num_workers,
    its least for an elastic run) of train.cpus_per_worker each must fit its nodes: Ray Train would
    otherwise wait for them for ever. (GPU workers: resolve_gpu.)"""
    room = fixed_room({"CPU": cpus})
    if room is not None and room.total < workers:
        raise BadInput(
            f"train.num_workers: {workers} CPU workers of train.cpus_per_worker={cpus:g} each, and this Ray cluster "
            f"holds {room.total} ({room.nodes}): ask for fewer workers, or fewer CPUs each"
        )


def build_pretrain(run: StageRun) -> dict:
    """Pretrain on {run_dir}/data into the stage's folder; returns the manifest's fields."""
    config, out_dir, train = run.config, run.out, run.config.train
    init_ray()
    plan = plan_pretraining(config, out_dir, gpu_capacity())
    if not plan.use_gpu:
        check_cpu_workers(train.min_workers, train.cpus_per_worker)
    plan = dataclasses.replace(plan, initial_checkpoint=continuation(run))
    check_resolved(run, plan)
    # the runs to go on with: the unfinished build's, or those of the complete output this run continues
    previous = out_dir if run.resumed else run.current if plan.initial_checkpoint else None
    params = flat_params({k: config_to_dict(getattr(config, k)) for k in ("corpus", "vocab", "data", "model", "train")})
    tracking = start_tracking(config, "pretrain", "pretrain", params, out_dir, previous)
    plan = dataclasses.replace(plan, tracking=tracking.plan)
    if run.resumed:
        print(f"pretrain: resuming the unfinished run in {out_dir}", flush=True)
    os.environ.setdefault(STATE_TRACKING_ENV, "1")
    storage_fs, storage_path = arrow_filesystem(out_dir)
    if isinstance(storage_fs, pafs.LocalFileSystem):
        os.makedirs(storage_path, exist_ok=True)
    check_train_snapshot(join(out_dir, CHECKPOINTS))  # what Ray Train resumes this run from
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"plan": plan},
        scaling_config=ScalingConfig(
            num_workers=(train.min_workers, train.max_workers) if train.elastic else train.max_workers,
            elastic_resize_monitor_interval_s=train.resize_check_s,
            use_gpu=plan.use_gpu,
            resources_per_worker={"CPU": train.cpus_per_worker, **({"GPU": 1} if plan.use_gpu else {})},
        ),
        run_config=ray.train.RunConfig(
            name=CHECKPOINTS,
            storage_path=storage_path,
            storage_filesystem=storage_fs,
            failure_config=FailureConfig(max_failures=train.max_failures, controller_failure_limit=train.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=train.checkpoints_to_keep),
            **quiet_train_run(),
        ),
    )
    counts = sorted({train.min_workers, train.max_workers})
    print(
        f"pretrain: {config.model.preset} (hidden {plan.albert.hidden_size}) on {'-'.join(map(str, counts))} "
        f"{'GPU' if plan.use_gpu else 'CPU'} workers{' (elastic)' if train.elastic else ''}: {train.max_steps} "
        f"steps of {train.global_batch_size} sequences ("
        + ", ".join(f"{train.accumulation_steps(w)} x {train.micro_batch(w)} per worker of {w}" for w in counts)
        + ")",
        flush=True,
    )
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as e:
        tracking.close(failed=True)
        raise RuntimeError(
            f"pretraining failed (after train.max_failures={train.max_failures} restarts; a re-run "
            f"resumes from the latest checkpoint in {join(out_dir, CHECKPOINTS)}): {e}"
        ) from e
    if not exists(join(out_dir, "eval.json")):
        raise RuntimeError(f"pretraining ended without writing {join(out_dir, 'eval.json')}")
    scheme = out_dir.partition("://")[0] + "://" if "://" in out_dir else ""  # Ray Train's paths carry none
    fields = manifest_fields(
        plan, config, path_inside(out_dir, scheme + result.checkpoint.path) if result.checkpoint else None
    )
    sop = fields["eval"]["sop_accuracy"]  # None without a sentence objective
    print(
        f"pretrain: validation mlm_accuracy {fields['eval']['mlm_accuracy']:.3f}, "
        + (f"sop_accuracy {sop:.3f}" if sop is not None else "no sentence objective")
        + f"; model in {join(run.current, 'hf')}",
        flush=True,
    )
    tracking.log_folder(join(out_dir, "hf"), "hf")
    tracking.close()
    return fields


run_pretrain = stage_runner("pretrain")
