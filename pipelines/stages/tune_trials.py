"""The Ray Tune trainables of a fine-tuning search (pipelines/stages/tune_search.py): a trial in one
process (a function trainable), or a driver running a Ray Train DDP job whose workers' reports
reach Tune through TuneReportCallback; each continues a resumed search's unfinished trial from the
checkpoint it is handed."""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from typing import Any

import ray
import ray.train
import ray.train.torch
import ray.tune
import torch
from ray.tune.integration.ray_train import TuneReportCallback

from ..config import Config, FinetuneSection, TuneSection
from ..errors import BadInput
from ..finetuning.trial import TrialData, fit_trial, trial_finetune
from ..storage import join
from ..storage.models import materialize
from .ray_runtime import check_train_snapshot, fixed_room, keep_ray_info_off_the_console, quiet_train_run
from .search_records import CONTINUES, finetune_keys


def trial_resources(tune_cfg: TuneSection) -> dict[str, float]:
    if tune_cfg.resources_per_trial is not None:
        return {k: float(v) for k, v in tune_cfg.resources_per_trial.items()}
    gpus = ray.cluster_resources().get("GPU", 0)
    return {"CPU": 1.0, **({"GPU": 1.0} if gpus else {})}


def check_trial_fits(tune_cfg: TuneSection, resources: dict[str, float]) -> None:
    """On a cluster that nothing adds nodes to, one trial's tune.workers_per_trial processes of
    `resources` each must fit its nodes: otherwise Tune waits for room for ever (a warning every
    minute that starts "Ignore this message if the cluster is autoscaling")."""
    workers = tune_cfg.workers_per_trial
    need = {{"cpu": "CPU", "gpu": "GPU"}.get(k, k): v for k, v in resources.items()}  # as with_resources reads them
    room = fixed_room(need)
    if room is not None and room.total < workers:
        each = "{" + ", ".join(f"{k}: {v:g}" for k, v in resources.items()) + "}"
        asked = f"={each}" if tune_cfg.resources_per_trial is not None else f" (null: {each})"
        raise BadInput(
            f"tune.resources_per_trial{asked} with tune.workers_per_trial={workers}: this Ray cluster holds "
            f"{room.total} training process{'es' * (room.total != 1)} of that size, and a trial needs {workers} "
            f"({room.nodes})"
        )


Continued = dict[str, "ray.train.Checkpoint | None"]
"""A resumed search's unfinished trials by id: the checkpoint each continues from (None: it starts over)."""


def single_process_trial(
    trial_config: dict[str, Any], base: FinetuneSection, data: TrialData, cpus: float, continued: Continued
) -> None:
    """One trial in this process: report each epoch's metrics and checkpoint to Tune."""
    # "Checkpoint successfully created at: ..." at each report, an INFO line of Ray Train's storage
    # module that Tune's function trainables use: kept out of the job's log
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    torch.set_num_threads(max(1, int(cpus)))
    cfg = trial_finetune(base, finetune_keys(trial_config))
    device = torch.device("cuda") if torch.cuda.is_available() and ray.get_gpu_ids() else torch.device("cpu")
    restored = continued.get(trial_config.get(CONTINUES))  # a resumed search's unfinished trial: its last epoch
    with tempfile.TemporaryDirectory() as work:
        pretrained = materialize(data.pretrained_files, os.path.join(work, "pretrained"))
        resume_from = restored.to_directory(os.path.join(work, "restored")) if restored else None

        def report(metrics: dict[str, Any], checkpoint: str | None) -> None:
            ray.tune.report(metrics, checkpoint=ray.tune.Checkpoint.from_directory(checkpoint))

        fit_trial(
            cfg, data, pretrained, os.path.join(work, "checkpoints"), report, device=device, resume_from=resume_from
        )


def ray_train_trial_worker(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker of a multi-process trial: DDP over gloo (CPU) or nccl (GPU)."""
    context = ray.train.get_context()
    keep_ray_info_off_the_console()
    torch.set_num_threads(max(1, int(loop_config["cpus"])))
    data: TrialData = ray.get(loop_config["data_ref"])
    cfg = trial_finetune(loop_config["base"], loop_config["trial_config"])
    # The trial's own last checkpoint when a resumed search continues it: the Train run is new
    # (named for a new Tune trial), so Ray Train restores nothing of its own.
    restored = loop_config["restored"]
    with tempfile.TemporaryDirectory() as work:
        pretrained = materialize(data.pretrained_files, os.path.join(work, "pretrained"))
        resume_from = restored.to_directory(os.path.join(work, "restored")) if restored else None

        def report(metrics: dict[str, Any], checkpoint: str | None) -> None:
            ray.train.report(
                metrics, checkpoint=ray.train.Checkpoint.from_directory(checkpoint) if checkpoint else None
            )

        fit_trial(
            cfg,
            data,
            pretrained,
            os.path.join(work, "checkpoints"),
            report,
            rank=context.get_world_rank(),
            world=context.get_world_size(),
            device=ray.train.torch.get_device(),
            wrap=ray.train.torch.prepare_model,
            resume_from=resume_from,
        )


def multi_worker_trial(
    trial_config: dict[str, Any],
    base: FinetuneSection,
    data: TrialData,
    workers: int,
    resources: dict[str, float],
    storage: str,
    metric: str,
    continued: Continued,
) -> None:
    """The trial's driver: a TorchTrainer whose worker reports TuneReportCallback forwards to Tune."""
    name = f"train-{ray.tune.get_context().get_trial_id()}"
    check_train_snapshot(join(storage, name))  # a retried trial's Train run resumes from it
    trainer = ray.train.torch.TorchTrainer(
        ray_train_trial_worker,
        train_loop_config={
            "trial_config": finetune_keys(trial_config),
            "base": base,
            "data_ref": ray.put(data),
            "cpus": resources.get("CPU", 1),
            "restored": continued.get(trial_config.get(CONTINUES)),
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=workers, use_gpu=resources.get("GPU", 0) > 0, resources_per_worker=resources
        ),
        run_config=ray.train.RunConfig(
            name=name,
            storage_path=storage,
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute=metric, checkpoint_score_order="max"
            ),
            callbacks=[TuneReportCallback()],
            **quiet_train_run(),
        ),
    )
    trainer.fit()


def build_trainable(config: Config, data_ref: ray.ObjectRef, storage: str, metric: str, continued: Continued):
    """The function trainable with its resources: one process, or a Ray Train driver.
    with_parameters hands each trial the object behind data_ref (put once by the driver).
    Each search's trainable has a name of its own: Ray Tune registers trainables by name for the
    whole driver, and an evaluation suite's searches run side by side (suite_tasks.py), each with
    its own task's data."""
    resources = trial_resources(config.tune)
    check_trial_fits(config.tune, resources)
    workers = config.tune.workers_per_trial
    if workers == 1:
        trainable = ray.tune.with_parameters(
            single_process_trial,
            base=config.finetune,
            data=data_ref,
            cpus=resources.get("CPU", 1),
            continued=continued,
        )
        trainable.__name__ = f"single_process_trial_{secrets.token_hex(4)}"
        return ray.tune.with_resources(
            trainable, {{"CPU": "cpu", "GPU": "gpu"}.get(k, k): v for k, v in resources.items()}
        )
    trainable = ray.tune.with_parameters(
        multi_worker_trial,
        base=config.finetune,
        data=data_ref,
        workers=workers,
        resources=resources,
        storage=storage,
        metric=metric,
        continued=continued,
    )
    trainable.__name__ = f"multi_worker_trial_{secrets.token_hex(4)}"
    # The driver only waits on its workers, which reserve the trial's compute; Tune needs it to
    # hold something, and a whole CPU would starve small machines (2 workers + driver > 2 CPUs).
    return ray.tune.with_resources(trainable, {"cpu": 0.01})
