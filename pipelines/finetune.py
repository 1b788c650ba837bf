"""`python -m pipelines.finetune`: fine-tune the pretrained ALBERT on a text classification or
regression table, searching hyperparameters with Ray Tune; export the best trial for transformers.

A trial is one process (a Tune function trainable) or, with tune.workers_per_trial > 1, a driver
that runs a Ray Train DDP job whose reports reach Tune through TuneReportCallback. Every trial
reports after each epoch (so ASHA can stop the laggards) with a transformers-format checkpoint.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import sys
import tempfile
from typing import Any

import pyarrow.fs
import ray
import ray.train
import ray.train.torch
import ray.tune
import torch
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY, TuneReportCallback
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator

from .cli import stage_main
from .config import Config, FinetuneSection, TuneSection, config_to_dict, searched_overrides, tune_metric
from .errors import MissingInput
from .finetuning.task import load_task
from .finetuning.tokenizer import PairTokenizer
from .finetuning.trial import TrialData, fit_trial, materialize, trial_finetune
from .lifecycle import StageRun, stage_runner
from .ray_runtime import init_ray
from .stages import pretrained_dir
from .storage import arrow_filesystem, filesystem, join, write_bytes, write_text

log = logging.getLogger(__name__)

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
SUMMARY_METRICS = ("accuracy", "macro_f1", "mcc", "pearson", "spearman", "eval_loss", "train_loss")


def read_pretrained_files(directory: str) -> dict[str, bytes]:
    """config.json, the weights (single or sharded safetensors, or pytorch_model.bin), spiece.model
    and tokenizer_config.json, local or s3://."""
    fs, root = filesystem(directory)
    if not fs.exists(f"{root}/config.json"):
        raise MissingInput(f"finetune.pretrained: {directory} has no config.json (not a transformers "
                                f"ALBERT directory; the default {{run_dir}}/pretrain/hf needs the pretrain stage)")
    names = {os.path.basename(p) for p in fs.ls(root, detail=False)}
    if "spiece.model" not in names:
        raise MissingInput(f"finetune.pretrained: {directory} has no spiece.model (the tokenizer)")
    wanted = [n for n in names if n in ("config.json", "spiece.model", "tokenizer_config.json", *WEIGHT_FILES)
              or (n.startswith("model-") and n.endswith(".safetensors"))]
    return {n: fs.cat_file(f"{root}/{n}") for n in sorted(wanted)}


def build_search_space(tune_cfg: TuneSection) -> dict[str, Any]:
    """tune.space as Ray Tune domains, keyed by the finetune keys they override."""
    space: dict[str, Any] = {}
    for key, spec in tune_cfg.space.items():
        if isinstance(spec, list):
            space[key] = ray.tune.choice(spec)
        elif isinstance(spec, dict):
            kind, (lo, hi) = next(iter(spec.items()))
            space[key] = {"loguniform": ray.tune.loguniform, "uniform": ray.tune.uniform}.get(
                kind, lambda a, b: ray.tune.randint(a, b + 1))(lo, hi)  # randint: hi inclusive
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


def _tune_resources(resources: dict[str, float]) -> dict[str, float]:
    return {{"CPU": "cpu", "GPU": "gpu"}.get(k, k): v for k, v in resources.items()}


def _single_process_trial(trial_config: dict[str, Any], base: FinetuneSection, data: TrialData, cpus: float) -> None:
    """One trial in this process: report each epoch's metrics and checkpoint to Tune."""
    torch.set_num_threads(max(1, int(cpus)))
    cfg = trial_finetune(base, trial_config)
    device = torch.device("cuda") if torch.cuda.is_available() and ray.get_gpu_ids() else torch.device("cpu")
    with tempfile.TemporaryDirectory() as work:
        pretrained = materialize(data.pretrained_files, os.path.join(work, "pretrained"))

        def report(metrics: dict[str, Any], checkpoint: str | None) -> None:
            ray.tune.report(metrics, checkpoint=ray.tune.Checkpoint.from_directory(checkpoint))

        fit_trial(cfg, data, pretrained, os.path.join(work, "checkpoints"), report, device=device)


def _train_worker(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker of a multi-process trial: DDP over gloo (CPU) or nccl (GPU)."""
    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    torch.set_num_threads(max(1, int(loop_config["cpus"])))
    data: TrialData = ray.get(loop_config["data_ref"])
    cfg = trial_finetune(loop_config["base"], loop_config["trial_config"])
    device = ray.train.torch.get_device()
    with tempfile.TemporaryDirectory() as work:
        pretrained = materialize(data.pretrained_files, os.path.join(work, "pretrained"))

        def report(metrics: dict[str, Any], checkpoint: str | None) -> None:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(checkpoint) if checkpoint else None)

        fit_trial(cfg, data, pretrained, os.path.join(work, "checkpoints"), report, rank=rank, world=world,
                  device=device, wrap=ray.train.torch.prepare_model)


def _multi_worker_trial(trial_config: dict[str, Any], base: FinetuneSection, data: TrialData,
                        workers: int, resources: dict[str, float], storage: str, metric: str) -> None:
    """The trial's driver: a TorchTrainer whose worker reports TuneReportCallback forwards to Tune."""
    trainer = ray.train.torch.TorchTrainer(
        _train_worker,
        train_loop_config={"trial_config": trial_config, "base": base, "data_ref": ray.put(data),
                           "cpus": resources.get("CPU", 1)},
        scaling_config=ray.train.ScalingConfig(num_workers=workers, use_gpu=resources.get("GPU", 0) > 0,
                                               resources_per_worker=resources),
        run_config=ray.train.RunConfig(
            name=f"train-{ray.tune.get_context().get_trial_id()}", storage_path=storage,
            checkpoint_config=ray.train.CheckpointConfig(num_to_keep=1, checkpoint_score_attribute=metric,
                                                         checkpoint_score_order="max"),
            callbacks=[TuneReportCallback()]))
    trainer.fit()


def build_trainable(config: Config, data_ref: ray.ObjectRef, storage: str, metric: str):
    # with_parameters hands each trial the object behind data_ref (put once by the driver).
    """The function trainable with its resources: one process, or a Ray Train driver."""
    resources = trial_resources(config.tune)
    workers = config.tune.workers_per_trial
    if workers == 1:
        trainable = ray.tune.with_parameters(_single_process_trial, base=config.finetune, data=data_ref,
                                             cpus=resources.get("CPU", 1))
        return ray.tune.with_resources(trainable, _tune_resources(resources))
    trainable = ray.tune.with_parameters(_multi_worker_trial, base=config.finetune, data=data_ref,
                                         workers=workers, resources=resources, storage=storage, metric=metric)
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
    The limit lives here: Tune ignores TuneSection.max_concurrent_trials, with only a warning, when
    the search algorithm it is given is a BasicVariantGenerator."""
    if tune_cfg.search == "optuna":
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(seed=tune_cfg.seed)
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent) if max_concurrent else searcher
    return BasicVariantGenerator(random_state=tune_cfg.seed, max_concurrent=max_concurrent or 0)


def _kept_epochs(result, filesystem: pyarrow.fs.FileSystem | None) -> list[tuple[dict[str, Any], ray.tune.Checkpoint]]:
    """A trial's epochs whose checkpoints still exist, with their metrics. num_to_keep=1 keeps the
    best-scoring one (the later on ties), so this is not always the best row of the metrics table:
    a tie broken there by eval_loss can point at a deleted checkpoint."""
    kept = [(metrics, checkpoint) for checkpoint, metrics in result.best_checkpoints or []]
    if kept or result.metrics_dataframe is None or CHECKPOINT_PATH_KEY not in result.metrics_dataframe:
        return kept
    # A Ray Train trial: its rows carry the checkpoint's path inside the storage filesystem (no
    # s3:// scheme), and only the kept checkpoints are still there.
    for row in result.metrics_dataframe.to_dict("records"):
        if isinstance(row.get(CHECKPOINT_PATH_KEY), str):
            checkpoint = ray.train.Checkpoint(row[CHECKPOINT_PATH_KEY], filesystem=filesystem)
            if checkpoint.filesystem.get_file_info(checkpoint.path).type != pyarrow.fs.FileType.NotFound:
                kept.append((row, checkpoint))
    return kept


def best_kept_epoch(result, metric: str, filesystem: pyarrow.fs.FileSystem | None = None,
                    ) -> tuple[dict[str, Any], ray.tune.Checkpoint] | tuple[None, None]:
    """The trial's best epoch (highest metric, then lowest eval_loss) among those with a checkpoint;
    `filesystem` is the search's storage (None: local)."""
    kept = [(m, c) for m, c in _kept_epochs(result, filesystem) if metric in m]
    if not kept:
        return None, None
    return max(kept, key=lambda mc: (mc[0][metric], -mc[0].get("eval_loss", 0.0)))


def summarize_trials(results, config: Config, metric: str, filesystem: pyarrow.fs.FileSystem | None = None,
                     ) -> list[dict[str, Any]]:
    """One row per trial: its hyperparameters, how it ended, and its best epoch's metrics."""
    rows = []
    for result in results:
        trial_config = {k: v for k, v in (result.config or {}).items() if k.startswith("finetune.")}
        cfg = trial_finetune(config.finetune, trial_config)
        best, checkpoint = best_kept_epoch(result, metric, filesystem)
        epochs_run = int(result.metrics.get("epoch", 0)) if result.metrics else 0
        status = "error" if result.error else ("completed" if epochs_run >= cfg.epochs else "stopped_early")
        row: dict[str, Any] = {"trial_id": (result.metrics or {}).get("trial_id", ""), "status": status,
                               "stopped_early": status == "stopped_early", "epochs_run": epochs_run,
                               **{key: getattr(cfg, key.partition(".")[2]) for key in config.tune.space},
                               "best_epoch": int(best["epoch"]) if best else None}
        for name in SUMMARY_METRICS:
            if best and name in best:
                row[name] = float(best[name])
        row["seconds"] = float((result.metrics or {}).get("time_total_s", 0.0))
        row["error"] = str(result.error).splitlines()[0] if result.error else ""
        row["_checkpoint"], row["_finetune"] = checkpoint, cfg
        rows.append(row)
    return rows


def trials_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for row in rows for k in row if not k.startswith("_")))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _summary(rows: list[dict[str, Any]], best: dict[str, Any], metric: str, out_dir: str) -> str:
    keys = [k for k in rows[0] if k.startswith("finetune.")]
    lines = [f"fine-tuning: {len(rows)} trials, {sum(r['stopped_early'] for r in rows)} stopped early by the "
             f"scheduler, {sum(r['status'] == 'error' for r in rows)} failed; metric {metric} (eval)"]
    for r in sorted(rows, key=lambda r: -r.get(metric, -math.inf)):
        params = " ".join(f"{k.partition('.')[2]}={r[k]:g}" if isinstance(r[k], float) else f"{k.partition('.')[2]}={r[k]}"
                          for k in keys)
        score = f"{r[metric]:.4f}" if metric in r else "-"
        lines.append(f"  {'*' if r is best else ' '} {r['trial_id']:>14} {r['status']:<13} epochs {r['epochs_run']:>2}"
                     f"  {metric} {score}  {params}")
    lines.append(f"best: trial {best['trial_id']} epoch {best['best_epoch']}: {metric} {best[metric]:.4f}; "
                 f"exported to {join(out_dir, 'best')}")
    return "\n".join(lines)


def build_finetune(run: StageRun) -> dict:
    """trials.csv, best.json and best/ in the stage's folder; returns the manifest's fields."""
    config = run.config
    metric = tune_metric(config)
    for key in searched_overrides(config):
        log.warning("%s=%s is searched by tune.space; the trials use the space's values", key,
                    getattr(config.finetune, key.partition(".")[2]))
    pretrained = pretrained_dir(config)
    files = read_pretrained_files(pretrained)
    task = load_task(config.finetune)
    with tempfile.TemporaryDirectory() as local:
        tokenizer = PairTokenizer(materialize(files, local))
    length = config.finetune.max_seq_length
    encode = lambda ex: [tokenizer.encode(t, p, length)  # noqa: E731
                         for t, p in zip(ex.texts, ex.pairs if ex.pairs is not None else [None] * len(ex))]
    data = TrialData(config.finetune.task, task.num_labels, task.label_names, encode(task.train),
                     encode(task.eval), task.train_targets, task.eval_targets, tokenizer.pad_id, files)
    truncated = {split: sum(len(ids) >= length for ids, _ in getattr(data, split)) for split in ("train", "eval")}

    storage = join(run.scratch, "tune")  # the search's working folder, removed when the output is complete
    if "://" not in storage:
        storage = os.path.abspath(storage)
    # Keeping one checkpoint per trial forces a state snapshot per report; Tune warns about it each time.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    init_ray()
    data_ref = ray.put(data)
    tc = config.tune
    scheduler = (ASHAScheduler(time_attr="training_iteration", max_t=max_epochs(config), grace_period=tc.grace_period,
                               reduction_factor=tc.reduction_factor) if tc.scheduler == "asha" else FIFOScheduler())
    tuner = ray.tune.Tuner(
        build_trainable(config, data_ref, storage, metric),
        param_space=build_search_space(tc),
        tune_config=ray.tune.TuneConfig(metric=metric, mode="max", num_samples=tc.num_samples, scheduler=scheduler,
                                        search_alg=search_algorithm(tc, concurrent_trials(tc))),
        run_config=ray.tune.RunConfig(
            name="search", storage_path=storage, verbose=0,
            checkpoint_config=ray.tune.CheckpointConfig(num_to_keep=1, checkpoint_score_attribute=metric,
                                                        checkpoint_score_order="max")))
    log.info("tuning %d trials over %s on %d train / %d eval examples", tc.num_samples, sorted(tc.space),
             len(data.train), len(data.eval))
    rows = summarize_trials(tuner.fit(), config, metric, arrow_filesystem(storage)[0])
    scored = [r for r in rows if metric in r]
    if not scored:
        raise RuntimeError("every fine-tuning trial failed: " + "; ".join(r["error"] for r in rows if r["error"]))
    best = max(scored, key=lambda r: (r[metric], -r.get("eval_loss", 0.0)))
    with tempfile.TemporaryDirectory() as local:
        best["_checkpoint"].to_directory(local)
        for name in sorted(os.listdir(local)):
            with open(os.path.join(local, name), "rb") as f:
                write_bytes(run.path("best", name), f.read())
    best_json = {"trial_id": best["trial_id"], "epoch": best["best_epoch"], "metric": metric, "value": best[metric],
                 "metrics": {k: best[k] for k in SUMMARY_METRICS if k in best},
                 "finetune": config_to_dict(best["_finetune"]), "label_names": task.label_names,
                 "eval_examples": len(data.eval)}
    write_text(run.path("best.json"), json.dumps(best_json, indent=2) + "\n")
    write_text(run.path("trials.csv"), trials_csv(rows))
    print(_summary(rows, best, metric, run.current), flush=True)
    return {"pretrained": pretrained, "init": config.finetune.init,
            "metric": metric, "best": {k: best_json[k] for k in ("trial_id", "epoch", "value")},
            "trials": {"total": len(rows), "completed": sum(r["status"] == "completed" for r in rows),
                       "stopped_early": sum(r["stopped_early"] for r in rows),
                       "failed": sum(r["status"] == "error" for r in rows)},
            "examples": task.accounting, "truncated": truncated, "label_names": task.label_names,
            "config": {"finetune": config_to_dict(config.finetune), "tune": config_to_dict(config.tune)}}


run_finetune = stage_runner("finetune")


if __name__ == "__main__":
    sys.exit(stage_main("finetune", "Fine-tune the pretrained ALBERT with a Ray Tune hyperparameter search."))
