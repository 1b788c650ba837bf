"""The stages, what each one reads, and the fingerprints that say whether a stage's output is up to date.

A stage's fingerprint hashes the config keys it depends on and its input stages' fingerprints (read
from their manifests), so changing `train.lr` changes pretrain's fingerprint and, through it,
finetune's, while vocab and data stay up to date. `run_dir` is not part of any fingerprint: the
same run written locally or to s3:// has the same fingerprints.
"""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from .config import RunConfig, config_to_dict
from .prep.storage import filesystem, join, read_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str
    config_keys: tuple[str, ...]
    """Sections (`data`) or single keys (`data.seed`) whose values the output depends on."""
    inputs: tuple[str, ...]
    """Stages whose outputs this one reads."""


STAGES: dict[str, Stage] = {s.name: s for s in [
    Stage("vocab", ("corpus", "vocab", "data.seed"), ()),
    Stage("data", ("corpus", "vocab", "data"), ("vocab",)),
    Stage("pretrain", ("model", "train"), ("data",)),
    Stage("finetune", ("finetune", "tune"), ("pretrain",)),
    Stage("report", (), ("data", "pretrain", "finetune")),
]}


def stage_dir(config: RunConfig, name: str) -> str:
    return join(config.run_dir, name)


def read_manifest(config: RunConfig, name: str) -> dict[str, Any] | None:
    """The stage's committed manifest, or None while the stage has not completed."""
    return read_json(join(stage_dir(config, name), "manifest.json"))


def _config_value(config: RunConfig, key: str) -> Any:
    section, _, name = key.partition(".")
    value = config_to_dict(getattr(config, section))
    return value[name] if name else value


def pretrained_dir(config: RunConfig) -> str:
    """The model fine-tuning starts from: finetune.pretrained, or the pretrain stage's export."""
    return config.finetune.pretrained or join(stage_dir(config, "pretrain"), "hf")


def directory_fingerprint(path: str) -> str:
    """A model directory made outside this run (no manifest): its config.json and each file's name and size."""
    fs, root = filesystem(path)
    if not fs.exists(f"{root}/config.json"):
        raise FileNotFoundError(f"finetune.pretrained: {path} has no config.json (not a transformers ALBERT directory)")
    digest = hashlib.sha256(fs.cat_file(f"{root}/config.json"))
    for info in sorted(fs.ls(root, detail=True), key=lambda i: i["name"]):
        digest.update(f"{info['name'].rsplit('/', 1)[-1]}:{info.get('size')}\n".encode())
    return digest.hexdigest()


def stage_fingerprint(config: RunConfig, name: str, input_fingerprints: dict[str, str] | None = None) -> str:
    """sha256 of the stage's config keys and its inputs' fingerprints (from their manifests unless given)."""
    stage = STAGES[name]
    if input_fingerprints is None:
        input_fingerprints = {}
        for dep in stage.inputs:
            if name == "finetune" and dep == "pretrain" and config.finetune.pretrained:
                input_fingerprints[dep] = directory_fingerprint(config.finetune.pretrained)
                continue
            manifest = read_manifest(config, dep)
            if manifest is None:
                raise FileNotFoundError(f"{name} needs the {dep} stage's output, and {stage_dir(config, dep)} "
                                        f"has none (no manifest.json): run the {dep} stage first")
            input_fingerprints[dep] = manifest.get("fingerprint", "")
    payload = {"stage": name, "config": {k: _config_value(config, k) for k in stage.config_keys},
               "inputs": {dep: input_fingerprints[dep] for dep in stage.inputs}}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def is_up_to_date(config: RunConfig, name: str) -> bool:
    """Whether the stage's committed output was made from this config and these inputs."""
    manifest = read_manifest(config, name)
    if manifest is None:
        return False
    try:
        return manifest.get("fingerprint") == stage_fingerprint(config, name)
    except FileNotFoundError:
        return False


def skip_if_up_to_date(config: RunConfig, name: str, force: bool) -> bool:
    """True (and says so) when the stage has nothing to do."""
    if not force and is_up_to_date(config, name):
        log.info("%s: up to date in %s (same config and inputs); nothing to do", name, stage_dir(config, name))
        print(f"{name}: up to date in {stage_dir(config, name)}; skipped (force it to run again)", flush=True)
        return True
    return False


__all__ = ["STAGES", "Stage", "directory_fingerprint", "is_up_to_date", "pretrained_dir", "read_manifest", "skip_if_up_to_date", "stage_dir",
           "stage_fingerprint"]
