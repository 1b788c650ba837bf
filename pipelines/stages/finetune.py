"""`albert-ray finetune`: fine-tune the pretrained ALBERT on a task (a table's classification,
regression or multi-label classification, token classification, multiple choice, extractive
question answering), searching hyperparameters with Ray Tune; export the best trial for
transformers, with its eval predictions where the task family writes them.

An evaluation suite (finetune.tasks) is one search per task, each exported under
finetune/<task>/ and each its own unit of caching: a task whose own fingerprint (its settings,
its files' content, the pretrained model) is unchanged is carried over from the current output
instead of searched again, and a task finished by an interrupted run is kept. An interrupted
search is resumed from its journal (pipelines/stages/tune_search.py): its finished trials are not
rerun.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable
from typing import Any

import ray
import ray.train

from ..config import Config, config_to_dict, searched_overrides
from ..errors import BadInput
from ..finetuning import results
from ..finetuning.evaluate import evaluate_model
from ..finetuning.families import task_family, tune_metric
from ..finetuning.trial import TrialData, check_pretrained, encode_task
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import UNIT_MANIFEST, input_fingerprints, pretrained_dir, stage_fingerprint, unit_configs
from ..storage import copy_tree, join, read_json, write_text
from ..storage.contained import Contained
from ..storage.models import read_model_files
from ..tracking import flat_params, scalars
from .ray_runtime import init_ray
from .stage_tracking import start_tracking
from .suite_tasks import search_tasks
from .tune_search import export_checkpoint, repeat_best, run_search

log = logging.getLogger(__name__)

HINTS = {"finetune.pretrained": "; the default {run_dir}/pretrain/hf needs the pretrain stage"}
"""What a missing model folder's error adds, by the key naming it."""


Teach = Callable[[TrialData], dict[str, Any]]
"""A search's teacher (the distill stage): given the encoded task and the teacher's files, it sets
the trials' `teacher` and returns what best.json and the manifest say of the teacher."""


def search_task(
    config: Config,
    out: str,
    final: str,
    scratch: str,
    resume: bool,
    name: str = "finetune",
    source: tuple[str, str] | None = None,
    teach: Teach | None = None,
) -> dict[str, Any]:
    """One task's search into `out`: trials.csv, best.json and best/ (its eval predictions beside
    it); with finetune.compare_random the same search from a random initialisation under random/.
    `final`: where `out` will be once the stage's output is committed (what messages name).
    `scratch` holds the searches' working folders; `resume` resumes interrupted ones found there.
    `name`: the search's tracked run and its stage. `source`: (the model folder the trials start
    from, the key naming it), by default finetune.pretrained's; `teach`: the distill stage's teacher.
    Returns the manifest's fields."""
    metric = tune_metric(config)
    for key in searched_overrides(config):
        log.warning(
            "%s=%s is searched by tune.space; the trials use the space's values",
            key,
            getattr(config.finetune, key.partition(".")[2]),
        )
    pretrained, key = source or (pretrained_dir(config), "finetune.pretrained")
    files = read_model_files(pretrained, key, HINTS.get(key, ""))
    check_pretrained(config.finetune, files, pretrained)  # before any table is read or trial started
    data = encode_task(config.finetune, files)
    task = data.encoded
    for line in filter(None, map(rejected_line, task.accounting.get("inputs", []))):
        log.warning("%s", line)  # every row is used or counted: the console says so where some are not
    taught = teach(data) if teach is not None else {}
    baseline = task_family(config.finetune.task).baseline(config.finetune, task)
    extra = {
        name: encode_task(dataclasses.replace(config.finetune, eval_path=path), files)
        for name, path in (config.finetune.extra_eval_paths or {}).items()
    }
    for name, encoded in extra.items():
        if encoded.encoded.label_names != task.label_names:
            raise BadInput(
                f"finetune.extra_eval_paths.{name}: its classes {encoded.encoded.label_names} are not the "
                f"training set's {task.label_names}"
            )
    storage = scratch if "://" in scratch else os.path.abspath(scratch)
    # Keeping one checkpoint per trial forces a state snapshot per report; Tune warns about it each time.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    init_ray()
    data_ref = ray.put(data)
    log.info(
        "tuning %d trials over %s on %d train / %d eval examples",
        config.tune.num_samples,
        sorted(config.tune.space),
        len(task.train),
        len(task.eval),
    )
    arms = {"pretrained": (config, "")}
    if config.finetune.compare_random and config.finetune.init != "random" and teach is None:
        random_config = dataclasses.replace(config, finetune=dataclasses.replace(config.finetune, init="random"))
        arms["random"] = (random_config, "random")
    fields: dict[str, Any] = {}
    for arm, (arm_config, sub) in arms.items():
        arm_out = join(out, sub) if sub else out
        arm_storage = join(storage, arm) if arm != "pretrained" else storage
        label = f"{name} ({arm} init)" if sub else name
        params = flat_params({"finetune": config_to_dict(arm_config.finetune), "tune": config_to_dict(arm_config.tune)})
        stage = name.split()[0]
        with start_tracking(arm_config, stage, label, params, arm_out, arm_out if resume else None) as tracked:
            search = tracked.search(label)
            rows = run_search(arm_config, data_ref, arm_storage, metric, resume=resume, tracking=search)
            best = results.pick_best(rows, metric)
            export_checkpoint(best["_checkpoint"], join(arm_out, "best"), arm_out)
            best_json = results.best_json(
                best, metric, task.label_names, task.eval_examples, list(config.tune.space), baseline
            )
            best_json.update(taught)
            if arm == "pretrained" and extra:
                best_json["extra_evals"] = evaluate_extra(arm_config, best["_checkpoint"], extra, arm_out)
            if config.tune.repeats:
                best_json["repeats"] = repeat_best(arm_config, data_ref, arm_storage, metric, best, resume, search)
            write_text(join(arm_out, "best.json"), json.dumps(best_json, indent=2) + "\n")
            write_text(join(arm_out, "trials.csv"), results.trials_csv(rows))
            tracked.driver.log_metrics(scalars(best_json["metrics"], "best/"), best_json["epoch"])
            tracked.log_folder(join(arm_out, "best"), "best")
        print(results.summary_text(rows, best, metric, join(final, sub) if sub else final), flush=True)
        fields[arm] = {
            "best": {k: best_json[k] for k in ("trial_id", "epoch", "value")},
            "best_metrics": best_json["metrics"],
            "trials": results.trial_counts(rows),
            **({"repeats": best_json["repeats"]} if "repeats" in best_json else {}),
            **({"extra_evals": best_json["extra_evals"]} if "extra_evals" in best_json else {}),
        }
    return {
        "pretrained": pretrained,
        "init": config.finetune.init,
        "metric": metric,
        **fields.pop("pretrained"),
        **taught,
        **({"random_arm": fields["random"]} if "random" in fields else {}),
        "task": config.finetune.task,
        "examples": task.accounting,
        "truncated": task.truncated,
        "label_names": task.label_names,
        "config": {"finetune": config_to_dict(config.finetune), "tune": config_to_dict(config.tune)},
    }


def evaluate_extra(
    config: Config, checkpoint: ray.train.Checkpoint, extra: dict[str, TrialData], out: str
) -> dict[str, dict[str, float]]:
    """The best model scored on each further evaluation file: its metrics, and its predictions files
    under extra_evals/<name>/."""
    found = {}
    with tempfile.TemporaryDirectory() as local:
        checkpoint.to_directory(local)
        for name, data in extra.items():
            evaluation = evaluate_model(config.finetune, data, local)
            found[name] = evaluation.metrics
            for file, text in evaluation.files.items():
                write_text(join(out, "extra_evals", name, file), text)
    return found


def read_json_or_none(path: str) -> Any:
    """A JSON file's value; None when it does not exist or cannot be read (an unfinished write)."""
    try:
        return read_json(path)
    except ValueError:
        return None


def build_finetune(run: StageRun) -> dict:
    """trials.csv, best.json and best/ in the stage's folder (an evaluation suite: in each task's
    folder, finetune/<task>/); returns the manifest's fields."""
    tasks = unit_configs(run.config, "finetune")
    if not tasks:
        return search_task(run.config, run.out, run.current, join(run.scratch, "tune"), run.resumed)
    inputs = input_fingerprints(run.config, "finetune")
    # the task folders of the build and of the current output, reached through no link
    building, previous = Contained(run.out, f"run_dir={run.config.run_dir}"), Contained(run.current, run.current)
    summary, searched, fingerprints = {}, {}, {}
    for name, config in tasks.items():
        fingerprint = stage_fingerprint(config, "finetune", inputs)
        out, current = run.path(name), join(run.current, name)
        built = read_json_or_none(join(out, UNIT_MANIFEST))
        kept = read_json_or_none(join(current, UNIT_MANIFEST))
        if built and built.get("fingerprint") == fingerprint:
            print(f"finetune: task {name}: done by the interrupted run, kept", flush=True)
            summary[name] = built
        elif kept and kept.get("fingerprint") == fingerprint:
            print(f"finetune: task {name}: up to date in {current}; carried over, not searched again", flush=True)
            building.delete(name)
            copy_tree(previous.path(name), out, last=[UNIT_MANIFEST])
            summary[name] = kept
        else:
            print(f"finetune: task {name}: searching", flush=True)
            building.delete(name)  # an unfinished attempt of another config
            summary[name], searched[name], fingerprints[name] = None, config, fingerprint

    def search(name: str, config: Config) -> dict:
        out, current = run.path(name), join(run.current, name)
        fields = {
            "fingerprint": fingerprints[name],
            **search_task(config, out, current, join(run.scratch, "tasks", name), run.resumed, f"finetune {name}"),
        }
        write_text(join(out, UNIT_MANIFEST), json.dumps(fields, indent=2) + "\n")
        return fields

    if searched:
        init_ray()  # once, before any task's thread
    summary.update(search_tasks(searched, search))
    write_text(run.path("suite.json"), json.dumps(results.suite_rows(summary), indent=2) + "\n")
    return {"tasks": {name: {k: v for k, v in f.items() if k != "config"} for name, f in summary.items()}}


def rejected_line(source: dict[str, Any]) -> str | None:
    """The console's line of a task input's rejected rows (its accounting in the manifest's
    `examples.inputs`: `rejected` by reason, `rejection_examples` a list, or lists by reason), None
    where it has none."""
    rejected = source.get("rejected") or {}
    if not rejected:
        return None
    examples = source.get("rejection_examples") or []
    if isinstance(examples, dict):
        examples = [line for lines in examples.values() for line in lines]
    counts = ", ".join(f"{n} {reason}" for reason, n in rejected.items())
    first = f"; first: {examples[0]}" if examples else ""
    return f"{source.get('source')}: {sum(rejected.values())} of {source.get('read')} rows rejected ({counts}){first}"


run_finetune = stage_runner("finetune")
