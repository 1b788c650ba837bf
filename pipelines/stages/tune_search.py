"""The Ray Tune search of the fine-tuning stage (pipelines/stages/finetune.py): the search space,
searcher, scheduler and resources, the trainables, restoring an interrupted search, the repeats of
the best configuration, and copying a trial's checkpoint out as the exported model.

A trial is one process (a Tune function trainable) or, with tune.workers_per_trial > 1, a driver
that runs a Ray Train DDP job whose reports reach Tune through TuneReportCallback. Every trial
reports after each epoch (so ASHA can stop the laggards) with a transformers-format checkpoint and
the training state it continues from (a restored search's unfinished trials do). The training
itself (pipelines/finetuning/trial.py) and the results (which epoch of which trial is best,
trials.csv, best.json: pipelines/finetuning/results.py) are free of Ray.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
from typing import Any

import pyarrow.fs
import ray
import ray.train
import ray.train.torch
import ray.tune
import torch
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY, TuneReportCallback
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator

from ..config import Config, FinetuneSection, TuneSection
from ..finetuning import results
from ..finetuning.trial import EXPORT_SKIPS, PREDICTIONS, TrialData, fit_trial, materialize, trial_finetune
from ..storage import arrow_filesystem, join, write_bytes
from ..tracking import Trackers, new_switches, scalars
from ..tracking.search import SearchTracking, open_trial
from .ray_runtime import keep_ray_info_off_the_console, quiet_train_run

log = logging.getLogger(__name__)


def build_search_space(tune_cfg: TuneSection) -> dict[str, Any]:
    """tune.space as Ray Tune domains, keyed by the finetune keys they override."""
    space: dict[str, Any] = {}
    for key, spec in tune_cfg.space.items():
        if isinstance(spec, list):
            space[key] = ray.tune.choice(spec)
        elif isinstance(spec, dict):
            kind, (lo, hi) = next(iter(spec.items()))
            space[key] = {"loguniform": ray.tune.loguniform, "uniform": ray.tune.uniform}.get(
                kind, lambda a, b: ray.tune.randint(a, b + 1)
            )(lo, hi)  # randint: hi inclusive
        else:
            space[key] = spec
    return space


def max_epochs(config: Config) -> int:
    spec = config.tune.space.get("finetune.epochs", config.finetune.epochs)
    if isinstance(spec, dict):
        return int(next(iter(spec.values()))[1])
    return int(max(spec) if isinstance(spec, list) else spec)


def trial_resources(tune_cfg: TuneSection) -> dict[str, float]:
    if tune_cfg.resources_per_trial is not None:
        return {k: float(v) for k, v in tune_cfg.resources_per_trial.items()}
    gpus = ray.cluster_resources().get("GPU", 0)
    return {"CPU": 1.0, **({"GPU": 1.0} if gpus else {})}


def single_process_trial(trial_config: dict[str, Any], base: FinetuneSection, data: TrialData, cpus: float) -> None:
    """One trial in this process: report each epoch's metrics and checkpoint to Tune."""
    torch.set_num_threads(max(1, int(cpus)))
    cfg = trial_finetune(base, trial_config)
    device = torch.device("cuda") if torch.cuda.is_available() and ray.get_gpu_ids() else torch.device("cpu")
    restored = ray.tune.get_checkpoint()  # a restored search's unfinished trial: its last epoch
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
    # The Train run's own latest checkpoint (Ray Train restores a run of the same name and storage),
    # else the Tune trial's last one when its search was restored.
    restored = ray.train.get_checkpoint() or loop_config.get("restored")
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
) -> None:
    """The trial's driver: a TorchTrainer whose worker reports TuneReportCallback forwards to Tune."""
    trainer = ray.train.torch.TorchTrainer(
        ray_train_trial_worker,
        train_loop_config={
            "trial_config": trial_config,
            "base": base,
            "data_ref": ray.put(data),
            "cpus": resources.get("CPU", 1),
            # a restored search's unfinished trial continues from the last checkpoint it reported
            "restored": ray.tune.get_checkpoint(),
        },
        scaling_config=ray.train.ScalingConfig(
            num_workers=workers, use_gpu=resources.get("GPU", 0) > 0, resources_per_worker=resources
        ),
        run_config=ray.train.RunConfig(
            name=f"train-{ray.tune.get_context().get_trial_id()}",
            storage_path=storage,
            checkpoint_config=ray.train.CheckpointConfig(
                num_to_keep=1, checkpoint_score_attribute=metric, checkpoint_score_order="max"
            ),
            callbacks=[TuneReportCallback()],
            **quiet_train_run(),
        ),
    )
    trainer.fit()


def build_trainable(config: Config, data_ref: ray.ObjectRef, storage: str, metric: str):
    """The function trainable with its resources: one process, or a Ray Train driver.
    with_parameters hands each trial the object behind data_ref (put once by the driver)."""
    resources = trial_resources(config.tune)
    workers = config.tune.workers_per_trial
    if workers == 1:
        trainable = ray.tune.with_parameters(
            single_process_trial, base=config.finetune, data=data_ref, cpus=resources.get("CPU", 1)
        )
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
    )
    # The driver only waits on its workers, which reserve the trial's compute; Tune needs it to
    # hold something, and a whole CPU would starve small machines (2 workers + driver > 2 CPUs).
    return ray.tune.with_resources(trainable, {"cpu": 0.01})


def concurrent_trials(tune_cfg: TuneSection) -> int | None:
    """tune.max_concurrent_trials, or as many trials as the cluster's CPUs and GPUs fit where Tune
    would not find that itself: multi-worker trials (drivers hold almost nothing, so Tune alone
    would start them all and leave them waiting) and the optuna search (a searcher without a
    concurrency limit gets one trial at a time from Tune)."""
    if tune_cfg.max_concurrent_trials is not None or (tune_cfg.workers_per_trial == 1 and tune_cfg.search == "random"):
        return tune_cfg.max_concurrent_trials
    per_trial = {k: v * tune_cfg.workers_per_trial for k, v in trial_resources(tune_cfg).items() if v > 0}
    cluster = ray.cluster_resources()
    return max(1, min(int(cluster.get(k, 0) // v) for k, v in per_trial.items())) if per_trial else None


def search_algorithm(tune_cfg: TuneSection, max_concurrent: int | None):
    """The searcher, limited to `max_concurrent` running trials (None: as many as resources allow).
    The limit lives here: Tune ignores TuneConfig.max_concurrent_trials, with only a warning, when
    the search algorithm it is given is a BasicVariantGenerator."""
    if tune_cfg.search == "optuna":
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(seed=tune_cfg.seed)
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent) if max_concurrent else searcher
    return BasicVariantGenerator(random_state=tune_cfg.seed, max_concurrent=max_concurrent or 0)


def checkpoint_at(filesystem: pyarrow.fs.FileSystem | None):
    """A checkpoint path inside the search's storage -> its Ray checkpoint, or None once deleted."""

    def at(path: str) -> ray.train.Checkpoint | None:
        checkpoint = ray.train.Checkpoint(path, filesystem=filesystem)
        return (
            None
            if checkpoint.filesystem.get_file_info(checkpoint.path).type == pyarrow.fs.FileType.NotFound
            else checkpoint
        )

    return at


def best_kept_epoch(result, metric: str, filesystem: pyarrow.fs.FileSystem | None = None):
    """The trial's best epoch among those whose checkpoint Tune or Ray Train kept (results.py)."""
    return results.best_kept_epoch(result, metric, checkpoint_at(filesystem), CHECKPOINT_PATH_KEY)


def upload_files(local: str, target: str) -> None:
    """The plain files of a local folder (none when it does not exist) into `target`, local or s3://."""
    for name in sorted(os.listdir(local)) if os.path.isdir(local) else []:
        if os.path.isfile(os.path.join(local, name)):
            with open(os.path.join(local, name), "rb") as f:
                write_bytes(join(target, name), f.read())


class TrialTracking(ray.tune.Callback):
    """Each trial's epochs to its trackers (pipelines/tracking/search.py), in the search's driver: a
    trial's runs open at its first result and end with it."""

    def __init__(self, search: SearchTracking, restored: bool = False):
        self.search, self.restored = search, restored
        self.trials: dict[str, Trackers] = {}
        self.switches = new_switches()  # shared by the trials: a failing backend warns once per search

    def __getstate__(self) -> dict[str, Any]:
        return {"search": self.search}  # Tune pickles its RunConfig with the search; open runs stay here

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Tune unpickles a search's callbacks only to restore it: its trials may have runs already
        self.__init__(state["search"], restored=True)

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if trial.trial_id not in self.trials:
            params = {k: v.item() if hasattr(v, "item") else v for k, v in trial.config.items()}
            self.trials[trial.trial_id] = open_trial(self.search, trial.trial_id, params, self.switches, self.restored)
        metrics = scalars(result, skip=(*AUTO_RESULT_KEYS, "epoch"))
        self.trials[trial.trial_id].log_metrics(metrics, int(result.get("epoch", result["training_iteration"])))

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.trials.pop(trial.trial_id, Trackers()).close()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.trials.pop(trial.trial_id, Trackers()).close(failed=True)


def run_search(
    config: Config,
    data_ref: ray.ObjectRef,
    storage: str,
    metric: str,
    name: str = "search",
    space: dict[str, Any] | None = None,
    num_samples: int | None = None,
    resume: bool = False,
    tracking: SearchTracking | None = None,
) -> list[dict[str, Any]]:
    """A Ray Tune search in `storage`/`name`: tune.space drawn tune.num_samples times (or the given
    space and count, without early stopping: the repeats); one row per trial (results.py). With
    `resume`, an interrupted search found there is restored: its finished trials are kept, not
    rerun, and its unfinished ones continue from their last checkpoint. `tracking`: each trial's
    epochs to its trackers (a restored search keeps the tracking it began with)."""
    tc = config.tune
    trainable = build_trainable(config, data_ref, storage, metric)
    experiment = join(storage, name)
    if resume and ray.tune.Tuner.can_restore(experiment):
        print(
            f"finetune: resuming the interrupted search in {experiment}: finished trials are kept, "
            "unfinished ones continue from their last checkpoint",
            flush=True,
        )
        tuner = ray.tune.Tuner.restore(experiment, trainable, resume_unfinished=True, param_space=space)
    else:
        if space is None and tc.scheduler == "asha":
            scheduler = ASHAScheduler(
                time_attr="training_iteration",
                max_t=max_epochs(config),
                grace_period=tc.grace_period,
                reduction_factor=tc.reduction_factor,
            )
        else:
            scheduler = FIFOScheduler()
        tuner = ray.tune.Tuner(
            trainable,
            param_space=build_search_space(tc) if space is None else space,
            tune_config=ray.tune.TuneConfig(
                metric=metric,
                mode="max",
                num_samples=tc.num_samples if num_samples is None else num_samples,
                scheduler=scheduler,
                search_alg=search_algorithm(tc, concurrent_trials(tc)) if space is None else None,
                max_concurrent_trials=concurrent_trials(tc) if space is not None else None,
                # a trial after another in the same slot runs in its process: no new process and
                # ~5 s of imports per trial (each trial seeds and builds everything it uses)
                reuse_actors=True,
            ),
            run_config=ray.tune.RunConfig(
                name=name,
                storage_path=storage,
                verbose=0,
                checkpoint_config=ray.tune.CheckpointConfig(
                    num_to_keep=1, checkpoint_score_attribute=metric, checkpoint_score_order="max"
                ),
                callbacks=[TrialTracking(tracking)] if tracking is not None else None,
            ),
        )
    return results.summarize_trials(
        tuner.fit(), config, metric, checkpoint_at(arrow_filesystem(storage)[0]), CHECKPOINT_PATH_KEY
    )


def export_checkpoint(checkpoint: ray.train.Checkpoint, model_dir: str, predictions_dir: str) -> None:
    """A trial's checkpoint as the exported model (its training state left out) and its eval
    predictions files beside it."""
    with tempfile.TemporaryDirectory() as local:
        checkpoint.to_directory(local)
        for name in EXPORT_SKIPS:
            if os.path.exists(os.path.join(local, name)):
                os.remove(os.path.join(local, name))
        upload_files(local, model_dir)
        upload_files(os.path.join(local, PREDICTIONS), predictions_dir)


def repeat_best(
    config: Config,
    data_ref: ray.ObjectRef,
    storage: str,
    metric: str,
    best: dict[str, Any],
    resume: bool,
    tracking: SearchTracking | None = None,
) -> dict[str, Any]:
    """The best configuration trained again with tune.repeats other seeds: each run's best epoch, and
    the metric's mean and standard deviation over the best trial and the repeats."""
    base = best["_finetune"]
    seeds = [base.seed + i for i in range(1, config.tune.repeats + 1)]
    space = {
        **{key: getattr(base, key.partition(".")[2]) for key in config.tune.space},
        "finetune.seed": ray.tune.grid_search(seeds),
    }
    rows = run_search(
        config, data_ref, storage, metric, name="repeats", space=space, num_samples=1, resume=resume, tracking=tracking
    )
    runs = [{"seed": base.seed, "value": best[metric], "trial_id": best["trial_id"]}]
    for row in sorted(rows, key=lambda r: r["_finetune"].seed):
        if metric not in row:
            raise RuntimeError(f"the repeat with finetune.seed={row['_finetune'].seed} failed: {row['error']}")
        runs.append({"seed": row["_finetune"].seed, "value": row[metric], "trial_id": row["trial_id"]})
    values = [r["value"] for r in runs]
    return {
        "metric": metric,
        "runs": runs,
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }
