"""The Ray Tune search of the fine-tuning stage (pipelines/stages/finetune.py): the search space,
searcher, scheduler and concurrency, resuming an interrupted search, the repeats of the best
configuration, and copying a trial's checkpoint out as the exported model.

A trial (tune_trials.py) is one process (a Tune function trainable) or, with
tune.workers_per_trial > 1, a driver that runs a Ray Train DDP job. Every trial reports after each
epoch (so ASHA can stop the laggards) with a transformers-format checkpoint and the training state
it continues from (a resumed search's unfinished trials do). The driver records every trial in the
search's journal (search_records.py); the rows come from it, and an interrupted search resumes from
it alone: Ray Tune's own state in the run_dir (tuner.pkl, the experiment and searcher state, each
trial's pickles) is never read back. The training itself (pipelines/finetuning/trial.py), the
journal (search_journal.py) and the results (which epoch of which trial is best, trials.csv,
best.json: pipelines/finetuning/results.py) are free of Ray.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import statistics
import tempfile
import threading
from collections import Counter
from typing import Any

import pyarrow.fs
import ray
import ray.train
import ray.train.torch
import ray.tune
from ray._common.usage.usage_lib import TagKey, record_extra_usage_tag
from ray.air._internal import usage as air_usage
from ray.tune.logger import LoggerCallback
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search.basic_variant import BasicVariantGenerator
from ray.tune.search.sample import Domain, _BackwardsCompatibleNumpyRng
from ray.tune.search.variant_generator import generate_variants

from ..config import Config, TuneSection
from ..errors import BadInput
from ..finetuning import results
from ..finetuning.search_journal import SearchJournal, parse_journal
from ..finetuning.trial import EXPORT_SKIPS, PREDICTIONS
from ..storage import arrow_filesystem, exists, join, path_inside, read_json, write_bytes
from ..tracking.search import SearchTracking
from .search_records import CONTINUES, JournalWriter, finetune_keys, search_callbacks
from .tune_trials import build_trainable, trial_resources

log = logging.getLogger(__name__)

REGISTERING = threading.Lock()


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


def draw_configs(space: dict[str, Any], num_samples: int, seed: int) -> list[dict[str, Any]]:
    """The configs a random or grid search runs, in order: Ray Tune's variant generation with the
    seeded generator BasicVariantGenerator(random_state=seed) draws from, so they are the draws a
    search of that seed always made (tested). Drawn here, a resumed search knows which are left."""
    rng = _BackwardsCompatibleNumpyRng(seed)
    return [
        finetune_keys(spec["config"])
        for _ in range(num_samples)
        for _, spec in generate_variants({"config": space}, random_state=rng)
    ]


def is_point(space: dict[str, Any]):
    """config -> whether it is one of `space`'s points: its keys, each value in its domain."""

    def inside(spec: Any, value: Any) -> bool:
        if isinstance(spec, Domain):
            try:
                return bool(spec.is_valid(value))
            except TypeError:  # a string where the domain holds numbers
                return False
        return value in spec["grid_search"] if isinstance(spec, dict) and "grid_search" in spec else value == spec

    return lambda config: set(config) == set(space) and all(inside(space[k], v) for k, v in config.items())


def max_epochs(config: Config) -> int:
    spec = config.tune.space.get("finetune.epochs", config.finetune.epochs)
    if isinstance(spec, dict):
        return int(next(iter(spec.values()))[1])
    return int(max(spec) if isinstance(spec, list) else spec)


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


def search_algorithm(
    tune_cfg: TuneSection,
    max_concurrent: int | None,
    points: list[dict[str, Any]] | None = None,
    told: list[tuple[dict[str, Any], float]] = (),
    attempt: int = 1,
):
    """The searcher, limited to `max_concurrent` running trials (None: as many as resources allow):
    optuna's TPE, first told the (config, metric) of the trials earlier attempts of a resumed search
    ran, or the given `points` in order (a random search's draws: draw_configs), else tune.seed's
    draws. The limit lives here: Tune ignores TuneConfig.max_concurrent_trials, with only a warning,
    when the search algorithm it is given is a BasicVariantGenerator."""
    if tune_cfg.search == "optuna" and points is None:
        from ray.tune.search import ConcurrencyLimiter
        from ray.tune.search.optuna import OptunaSearch

        searcher = OptunaSearch(
            # another seed per attempt: TPE's first suggestions are random draws, which tune.seed's
            # sampler would repeat, not continue (the trials already run, again)
            seed=tune_cfg.seed + attempt - 1,
            points_to_evaluate=[config for config, _ in told] or None,
            evaluated_rewards=[value for _, value in told] or None,
        )
        return ConcurrencyLimiter(searcher, max_concurrent=max_concurrent) if max_concurrent else searcher
    return BasicVariantGenerator(
        points_to_evaluate=points, random_state=tune_cfg.seed, max_concurrent=max_concurrent or 0
    )


def checkpoint_at(storage: str):
    """A checkpoint path relative to the search's storage (as the journal records it) -> its Ray
    checkpoint, or None once deleted. A path that leaves the storage, through `..` or a link, is
    refused: the journal is a file of the run_dir."""
    filesystem, root = arrow_filesystem(storage)

    def at(relative: str) -> ray.train.Checkpoint | None:
        inside = path_inside(storage, join(storage, relative))
        if not inside or inside == "." or inside.startswith("/"):
            raise BadInput(f"{join(storage, relative)}: a checkpoint the search's journal names outside {storage}")
        checkpoint = ray.train.Checkpoint(posixpath.join(root, inside), filesystem=filesystem)
        return (
            None
            if checkpoint.filesystem.get_file_info(checkpoint.path).type == pyarrow.fs.FileType.NotFound
            else checkpoint
        )

    return at


def upload_files(local: str, target: str) -> None:
    """The plain files of a local folder (none when it does not exist) into `target`, local or s3://."""
    for name in sorted(os.listdir(local)) if os.path.isdir(local) else []:
        if os.path.isfile(os.path.join(local, name)):
            with open(os.path.join(local, name), "rb") as f:
                write_bytes(join(target, name), f.read())


def read_journal(path: str, space: dict[str, Any]) -> SearchJournal | None:
    """The journal of an interrupted search at `path`, checked; None when there is none."""
    return parse_journal(read_json(path), path, is_point(space)) if exists(path) else None


def tag_own_callbacks(callbacks: list[ray.tune.Callback] | None) -> None:
    """Ray Tune's usage record of a run's callbacks, as ray.tune.run makes it (ray.air._internal.usage
    `tag_callbacks`), without its imports. Ray's imports its MLflow, W&B, Comet and Aim integrations,
    and with them mlflow (~3 s of a search's start on a quiet 2-core VM, ~5 s on a busy one: every
    finetune stage paid it, with or without tracking), only to compare their class names; a search's
    callbacks (search_records.search_callbacks) are never those, and count as Ray counts any other:
    "CustomLoggerCallback" or "CustomCallback". Ray's own runs for a callback of Ray's."""
    callbacks = [c for c in callbacks or () if isinstance(c, ray.tune.Callback)]
    if any(type(c).__module__.startswith("ray.") for c in callbacks):
        RAY_TAG_CALLBACKS(callbacks)
        return
    counts = Counter("CustomLoggerCallback" if isinstance(c, LoggerCallback) else "CustomCallback" for c in callbacks)
    if counts:
        record_extra_usage_tag(TagKey.AIR_CALLBACKS, json.dumps(counts))


RAY_TAG_CALLBACKS = air_usage.tag_callbacks
air_usage.tag_callbacks = tag_own_callbacks  # once, on import: ray.tune.run calls it through the module


def tune_run(
    trainable, space: dict, samples: int, search_alg, scheduler, storage: str, experiment: str, metric: str, callbacks
) -> None:
    """One Ray Tune run of a search. ray.tune.run, the run Tuner.fit drives, without the ResultGrid
    Tuner.fit builds at its end, which unpickles each failed trial's error.pkl from the storage: the
    rows come from the journal. Quiet in the job's log: Ray Tune's newer output engine prints its
    configuration box, "View detailed results here" and a TensorBoard hint under `_scratch/` (deleted
    with the build) even at verbose=0, the legacy engine (RAY_AIR_NEW_OUTPUT=0) nothing at verbose=0;
    its closing INFO line ("Wrote the latest version of all result files ...") names that same
    folder. The search prints its own table at the end (results.summary_text)."""
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    logging.getLogger("ray.tune").setLevel(logging.WARNING)
    # Ray Tune's registry of trainables is not thread-safe (an evaluation suite's searches run in
    # threads: suite_tasks.py): registered here one at a time, each under its own name, and run by name
    with REGISTERING:
        ray.tune.register_trainable(trainable.__name__, trainable)
    ray.tune.run(
        trainable.__name__,
        name=experiment,
        storage_path=storage,
        config=space,
        num_samples=samples,
        search_alg=search_alg,
        scheduler=scheduler or FIFOScheduler(),
        metric=metric,
        mode="max",
        checkpoint_config=ray.tune.CheckpointConfig(
            num_to_keep=1, checkpoint_score_attribute=metric, checkpoint_score_order="max"
        ),
        callbacks=callbacks,
        verbose=0,
        # a trial after another in the same slot runs in its process: no new process and ~5 s of
        # imports per trial (each trial seeds and builds everything it uses)
        reuse_actors=True,
        raise_on_failed_trial=False,
    )


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
    """A Ray Tune search in `storage`: tune.space drawn tune.num_samples times (or the given space
    and count, without early stopping: the repeats); one row per trial (results.py), from the
    search's journal, `storage`/`name`.journal.json. With `resume`, an interrupted search is resumed
    from that journal: its trials that ended are kept, not rerun; its unfinished ones continue from
    their last checkpoint (each a new Ray Tune trial under its first id); then the samples it had
    not started run. `tracking`: each trial's epochs to its trackers."""
    tc = config.tune
    searched = space is None
    space = build_search_space(tc) if searched else space
    samples = tc.num_samples if num_samples is None else num_samples
    optuna = searched and tc.search == "optuna"
    planned = None if optuna else draw_configs(space, samples, tc.seed)
    path, at = join(storage, f"{name}.journal.json"), checkpoint_at(storage)
    journal = read_journal(path, space) if resume else None
    experiment, continued = name, {}
    if journal is None:
        journal = SearchJournal()
    else:
        journal.attempts += 1
        experiment = f"{name}-{journal.attempts}"
        for trial_id, record in journal.unfinished().items():
            checkpoint = record.continue_from(lambda relative: at(relative) is not None)
            continued[trial_id] = at(checkpoint) if checkpoint else None
        left = samples - len(journal.trials) if optuna else len(journal.remaining(planned))
        print(
            f"finetune: resuming the interrupted search in {storage} from {path}: "
            f"{len(journal.trials) - len(continued)} trials that ended are kept, {len(continued)} unfinished "
            f"continue from their last checkpoint, {max(0, left)} not started run",
            flush=True,
        )
    writer = JournalWriter(journal, path, storage)
    writer.save()
    callbacks, limit = search_callbacks(writer, tracking), concurrent_trials(tc)
    if continued:
        points = [{**journal.trials[trial_id].config, CONTINUES: trial_id} for trial_id in continued]
        tune_run(
            build_trainable(config, data_ref, storage, metric, continued),
            {**space, CONTINUES: ray.tune.choice(list(continued))},
            len(points),
            BasicVariantGenerator(points_to_evaluate=points, max_concurrent=limit or 0),
            None,
            storage,
            f"{experiment}-continued",
            metric,
            callbacks,
        )
    if optuna:
        domains = [k for k, v in space.items() if isinstance(v, Domain)]
        told = [({k: c[k] for k in domains}, value) for c, value in journal.scored(metric)]
        search_alg = search_algorithm(tc, limit, told=told, attempt=journal.attempts)
        left = samples - len(journal.trials)
    else:
        todo = journal.remaining(planned)
        search_alg, left = search_algorithm(tc, limit, points=todo), len(todo)
    if left > 0:
        scheduler = (
            ASHAScheduler(
                time_attr="training_iteration",
                max_t=max_epochs(config),
                grace_period=tc.grace_period,
                reduction_factor=tc.reduction_factor,
            )
            if searched and tc.scheduler == "asha"
            else None
        )
        trainable = build_trainable(config, data_ref, storage, metric, {})
        tune_run(trainable, space, left, search_alg, scheduler, storage, experiment, metric, callbacks)
    return results.summarize_trials(journal.trials, config, metric, at)


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
