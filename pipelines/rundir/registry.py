"""The stages, declared once each, and the fingerprints that say whether an output is up to date.

A declaration says everything the shared lifecycle (pipelines/rundir/lifecycle.py) and the DAG
(pipelines/stages/dag.py) need: the run function, the config keys that change the result, the
stages and config paths it reads, what its folder holds. Adding a stage is one entry here and
its run function.

A stage's fingerprint hashes the values of its result keys (SETTINGS left out: they never change
a result) and its inputs' fingerprints (read from their manifests), so changing `train.lr`
changes pretrain's fingerprint and, through it, finetune's, while changing `train.log_every` or
`train.num_workers` changes nothing. `run_dir` is in no fingerprint: the same run written locally
or to s3:// has the same fingerprints."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import posixpath
from dataclasses import dataclass
from typing import Any

from ..config import SETTINGS, Config, config_to_dict, finetune_as_searched, neutral_keys, task_configs
from ..errors import BadInput, MissingInput
from ..finetuning.families import unread_keys
from ..storage import filesystem, is_remote, join, key_relpath, path_inside, read_bytes
from ..storage.models import require_model_dir

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
UNIT_MANIFEST = "task.json"
"""Written last into a unit's folder (an evaluation suite's task): the unit is complete, with its fingerprint."""


@dataclass(frozen=True)
class Stage:
    name: str
    run: str
    """`module:function` doing the stage's work into a folder (lifecycle.StageRun); returns the manifest's fields."""
    summary: str
    """One line: what the stage makes."""
    config_keys: tuple[str, ...] = ()
    """Sections (`data`) or keys (`data.seed`) whose values change the output; SETTINGS are left out."""
    inputs: tuple[str, ...] = ()
    """Stages whose outputs it reads."""
    outputs: tuple[str, ...] = ()
    """What its folder holds besides config.yaml and manifest.json (shown by --dry-run)."""
    input_paths: tuple[str, ...] = ()
    """Config keys naming paths it reads; none may lie inside an output that a run replaces."""
    content_keys: tuple[str, ...] = ()
    """Of input_paths, those whose content (not only their name) is in the fingerprint."""
    input_override: tuple[str, str] | None = None
    """(stage, key): when the config key is set, its path is read instead of that stage's output."""
    partial_inputs: bool = False
    """Runs with whichever inputs exist (the report); otherwise every input must be complete."""
    builds_inputs: tuple[str, ...] = ()
    """Inputs that the standalone command builds first when they are missing or stale."""
    resumable: bool = False
    """An unfinished build of the same lineage is resumed (from its checkpoints), not restarted."""
    extends: tuple[str, ...] = ()
    """Keys whose change continues a complete output instead of redoing it (the lineage leaves them out)."""
    publish: str | None = None
    """A key naming a folder outside the run_dir that the committed output is also copied to
    (predict.output: pipelines/rundir/publish.py)."""
    enabled_by: str | None = None
    """A key that must be set for the stage to run (predict.input): unset, the DAG leaves the stage
    out and its command says what to set."""
    units: str | None = None
    """The key that splits the stage into units (finetune.tasks: an evaluation suite), each with its own
    config (config.task_configs) and fingerprint: a unit whose fingerprint is unchanged is carried
    over from the current output, not redone."""


TASK_FILES = ("finetune.train_path", "finetune.eval_path", "finetune.extra_eval_paths")
"""The fine-tuning task's files, which the finetune and distill stages read (their content fingerprinted)."""

STAGES: dict[str, Stage] = {
    s.name: s
    for s in [
        Stage(
            "vocab",
            "pipelines.stages.vocab:build_vocab",
            "the SentencePiece vocabulary",
            config_keys=("corpus", "vocab", "data.seed"),
            outputs=("spiece.model", "spiece.vocab"),
            input_paths=("corpus.paths", "vocab.model"),
            content_keys=("vocab.model",),
        ),
        Stage(
            "data",
            "pipelines.stages.data:build_data",
            "MLM examples with a sentence objective (SOP, NSP or none) as parquet shards",
            config_keys=("corpus", "vocab", "data"),
            inputs=("vocab",),
            outputs=("train/*.parquet", "validation/*.parquet"),
            input_paths=("corpus.paths",),
            builds_inputs=("vocab",),
        ),
        Stage(
            "pretrain",
            "pipelines.stages.pretrain:build_pretrain",
            "the pretrained model, its curves and checkpoints",
            config_keys=("model", "train"),
            inputs=("data",),
            outputs=("metrics.jsonl", "eval.json", "hf/", "train/checkpoint_*/"),
            input_paths=("train.init_from",),
            content_keys=("train.init_from",),
            resumable=True,
            extends=("train.max_steps",),
        ),
        Stage(
            "finetune",
            "pipelines.stages.finetune:build_finetune",
            "the fine-tuning search and its best model",
            config_keys=("finetune", "tune"),
            inputs=("pretrain",),
            outputs=("trials.csv", "best.json", "best/"),
            input_paths=("finetune.pretrained", *TASK_FILES),
            content_keys=("finetune.pretrained", *TASK_FILES),
            input_override=("pretrain", "finetune.pretrained"),
            resumable=True,
            units="finetune.tasks",
        ),
        Stage(
            "distill",
            "pipelines.stages.distill:build_distill",
            "a shallower student of the fine-tuned model and its search",
            config_keys=("distill", "finetune", "tune"),
            inputs=("finetune",),
            outputs=("trials.csv", "best.json", "best/"),
            input_paths=("distill.teacher", *TASK_FILES),
            content_keys=("distill.teacher", *TASK_FILES),
            input_override=("finetune", "distill.teacher"),
            resumable=True,
            enabled_by="distill.layers",
        ),
        Stage(
            "predict",
            "pipelines.stages.predict:build_predict",
            "the fine-tuned model's predictions over predict.input",
            config_keys=("predict",),
            inputs=("finetune",),
            outputs=("predictions/*.parquet",),
            input_paths=("predict.model", "predict.input"),
            content_keys=("predict.model", "predict.input"),
            input_override=("finetune", "predict.model"),
            publish="predict.output",
            enabled_by="predict.input",
        ),
        Stage(
            "report",
            "pipelines.stages.report:build_report",
            "report.md with its figures",
            inputs=("data", "pretrain", "finetune", "distill"),
            outputs=("report.md", "*.png", "layer_transitions.json"),
            partial_inputs=True,
        ),
    ]
}


def stage_dir(config: Config, name: str) -> str:
    return join(config.run_dir, name)


def read_manifest_at(folder: str) -> dict[str, Any] | None:
    """A folder's manifest; None while it is incomplete. A manifest that cannot be read (truncated,
    not JSON, a link loop, a folder in its place) counts as incomplete, with a warning: the stage is
    redone. A folder that is a link is never a complete output of this run_dir (the ownership checks
    then refuse it)."""
    path = join(folder, MANIFEST)
    if not is_remote(folder) and os.path.islink(filesystem(folder)[1]):
        return None
    try:
        manifest = json.loads(read_bytes(path))
        if not isinstance(manifest, dict):
            raise ValueError(f"a {type(manifest).__name__}, not an object")
        return manifest
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else " ".join(str(e).split())
        log.warning("%s is unreadable (%s): the output counts as incomplete and will be redone", path, why)
        print(
            f"warning: {path} is unreadable ({type(e).__name__}): the output counts as incomplete and will be redone",
            flush=True,
        )
        return None


def read_manifest(config: Config, name: str) -> dict[str, Any] | None:
    """The stage's committed manifest, or None while the stage has no complete output."""
    return read_manifest_at(stage_dir(config, name))


def pretrained_dir(config: Config) -> str:
    """The model fine-tuning starts from: finetune.pretrained, or the pretrain stage's export."""
    return config.finetune.pretrained or join(stage_dir(config, "pretrain"), "hf")


def config_value(config: Config, key: str) -> Any:
    section, _, name = key.partition(".")
    value = getattr(config, section)
    return config_to_dict(value)[name] if name else value


def result_values(config: Config, keys: tuple[str, ...], exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values of `keys` (sections without their SETTINGS, the keys the config's task does not
    read, and `exclude` keys; with tune, the finetune keys tune.space searches at their defaults)."""
    values: dict[str, Any] = {}
    exclude = (*exclude, *neutral_keys(config), *unread_keys(config.finetune.task))
    for key in keys:
        if "." in key:
            values[key] = config_value(config, key)
            continue
        searched = key == "finetune" and "tune" in keys
        section = finetune_as_searched(config) if searched else config_to_dict(getattr(config, key))
        values[key] = {k: v for k, v in section.items() if f"{key}.{k}" not in SETTINGS and f"{key}.{k}" not in exclude}
    return values


def inside_stage(config: Config, path: str) -> tuple[str, str] | None:
    """(stage, path inside its folder) when `path` lies inside a stage's current output in run_dir."""
    rel = path_inside(config.run_dir, path)
    if not rel:
        return None
    first, _, rest = rel.partition("/")
    return (first, rest) if first in STAGES else None


@functools.lru_cache(maxsize=256)
def _local_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of a local file's content (cached while its size and mtime stay the same)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_identity(path: str) -> str:
    """What identifies a file's content: its sha256 locally, its size and ETag on S3."""
    fs, p = filesystem(path)
    if is_remote(path):
        info = fs.info(p)
        return f"{info.get('size')}:{info.get('ETag')}"
    stat = os.stat(p)
    return _local_digest(p, stat.st_size, stat.st_mtime_ns)


MODEL_KEYS = ("finetune.pretrained", "train.init_from", "predict.model")
"""Input keys naming a transformers ALBERT folder (fingerprinted by its own files)."""


def enabled(config: Config, name: str) -> bool:
    """Whether the stage is configured to run (its enabled_by key set, where it has one)."""
    key = STAGES[name].enabled_by
    return key is None or config_value(config, key) is not None


def path_fingerprint(config: Config, key: str, path: str, known: dict[str, str] | None = None) -> str:
    """What identifies an input's content: inside one of this run's stage outputs, that stage's
    fingerprint (from `known`, else its manifest); a file, its content; a folder (a transformers
    model), each file's name and content."""
    inside = inside_stage(config, path)
    if inside is not None:
        stage, rel = inside
        fingerprint = (known or {}).get(stage) or (read_manifest(config, stage) or {}).get("fingerprint")
        if not fingerprint:
            raise MissingInput(f"{key}={path}: the {stage} stage has no complete output in {stage_dir(config, stage)}")
        return f"{stage}:{fingerprint}:{rel}"
    fs, p = filesystem(path)
    if is_remote(path):
        fs.invalidate_cache(p)
    if not fs.exists(p):
        raise MissingInput(f"{key}: {path} does not exist")
    if not fs.isdir(p):
        return _file_identity(path)
    digest = hashlib.sha256()
    if key in MODEL_KEYS:  # a transformers folder: its own files
        require_model_dir(path, key)
        for name in sorted(os.path.basename(f.rstrip("/")) for f in fs.ls(p, detail=False)):
            if not fs.isdir(posixpath.join(p, name)):
                digest.update(f"{name}:{_file_identity(join(path, name))}\n".encode())
        return digest.hexdigest()
    for found in sorted(fs.find(p)):  # a folder of inputs (RACE's, a table's parts): every file below
        rel = key_relpath(found, p)
        digest.update(f"{rel}:{_file_identity(join(path, rel))}\n".encode())
    return digest.hexdigest()


def unit_configs(config: Config, name: str) -> dict[str, Config]:
    """The stage's units with their own configs (an evaluation suite's tasks); empty when it has none."""
    return task_configs(config) if STAGES[name].units and config_value(config, STAGES[name].units) else {}


def stage_inputs(config: Config, name: str) -> tuple[str, ...]:
    """The stages this one reads under this config: an input_override key set replaces one, and a
    stage the config does not enable (distill without distill.layers) is no input (of the report)."""
    stage = STAGES[name]
    override = stage.input_override
    return tuple(
        d
        for d in stage.inputs
        if enabled(config, d) and not (override and override[0] == d and config_value(config, override[1]))
    )


def input_fingerprints(config: Config, name: str, allow_missing: bool | None = None) -> dict[str, str]:
    """The fingerprints of the stage's input stages, from their manifests; a missing input raises
    MissingInput, or counts as "" where allowed (by default: a stage that takes partial inputs)."""
    stage = STAGES[name]
    allow_missing = stage.partial_inputs if allow_missing is None else allow_missing
    found = {}
    for dep in stage_inputs(config, name):
        manifest = read_manifest(config, dep)
        if manifest is None and not allow_missing:
            raise MissingInput(
                f"{name} needs the {dep} stage's output, and {stage_dir(config, dep)} has none "
                f"(no manifest.json): run the {dep} stage first"
            )
        found[dep] = (manifest or {}).get("fingerprint", "")
    return found


def stage_fingerprint(
    config: Config,
    name: str,
    inputs: dict[str, str] | None = None,
    exclude: tuple[str, ...] = (),
    known: dict[str, str] | None = None,
) -> str:
    """sha256 of the stage's result values, its content-fingerprinted input paths and its inputs'
    fingerprints (from their manifests unless given); `exclude` leaves keys out (the lineage);
    `known`: stage fingerprints to use for input paths inside this run's outputs (a prediction)."""
    stage = STAGES[name]
    known = known if known is not None else inputs
    inputs = input_fingerprints(config, name) if inputs is None else inputs
    paths: dict[str, Any] = {}
    for key in stage.content_keys:
        value = config_value(config, key)
        if isinstance(value, dict):
            paths[key] = {k: path_fingerprint(config, f"{key}.{k}", v, known) for k, v in sorted(value.items())}
        elif value:
            paths[key] = path_fingerprint(config, key, value, known)
    payload = {
        "stage": name,
        "config": result_values(config, stage.config_keys, exclude),
        "inputs": {dep: inputs.get(dep, "") for dep in stage_inputs(config, name)},
        "paths": paths,
    }
    units = unit_configs(config, name)
    if units:  # each unit's own fingerprint (its input files' content included)
        payload["units"] = {unit: stage_fingerprint(c, name, inputs, exclude, known) for unit, c in units.items()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def lineage_fingerprint(config: Config, name: str, inputs: dict[str, str] | None = None) -> str:
    """The fingerprint without the stage's `extends` keys: equal for runs that continue one another."""
    return stage_fingerprint(config, name, inputs, exclude=STAGES[name].extends)


def is_up_to_date(config: Config, name: str) -> bool:
    """Whether the stage's complete output was made from this config and these inputs, all of them
    complete (a report made without some of its inputs is never up to date)."""
    manifest = read_manifest(config, name)
    if manifest is None:
        return False
    try:
        inputs = input_fingerprints(config, name, allow_missing=False)
        return manifest.get("fingerprint") == stage_fingerprint(config, name, inputs)
    except (MissingInput, BadInput):
        return False


__all__ = [
    "MANIFEST",
    "UNIT_MANIFEST",
    "SETTINGS",
    "STAGES",
    "Stage",
    "config_value",
    "enabled",
    "input_fingerprints",
    "inside_stage",
    "is_up_to_date",
    "lineage_fingerprint",
    "path_fingerprint",
    "pretrained_dir",
    "read_manifest",
    "read_manifest_at",
    "result_values",
    "stage_dir",
    "stage_fingerprint",
    "stage_inputs",
    "unit_configs",
]
