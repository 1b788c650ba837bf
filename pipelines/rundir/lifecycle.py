"""The one lifecycle every stage runs through: refuse what is not ours, skip what is up to date,
take the run_dir's lease, build beside, write the manifest last, swap in.

Layout of a run_dir (documented in docs/run-directories.md):

    .albert-ray.json        marker: albert-ray made (or adopted) this folder (pipelines/rundir/ownership.py)
    _lease.json             the lease of the run writing here (pipelines/rundir/lease.py)
    <stage>/                the stage's current output: marker, outputs, config.yaml, manifest.json (last)
    _building/<stage>/      its next output while that is built; an unfinished pretraining resumes from it
    _previous/<stage>/      the output it replaced, kept until the next replacement is complete
    _swap.json              the journal of a swap in progress (pipelines/rundir/generations.py)
    costs/<stage>.json      what the DAG measured

A stage's run function only does the stage's work, into the folder it is given (StageRun.out).
"""

from __future__ import annotations

import importlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..config import Config, dump_yaml
from ..errors import ConfigError
from ..storage import join, list_names, write_json, write_text
from .generations import building_dir, commit, finish_interrupted_swap, keep_orphaned, own_folders, set_aside
from .lease import Fence, hold, read_holder
from .ownership import (
    BUILDING,
    MARKER,
    check_input_paths,
    check_run_dir,
    ensure_folder,
    ensure_run_dir,
    read_marker,
    refuse_unowned,
    write_marker,
)
from .publish import check_target, publish
from .registry import (
    MANIFEST,
    STAGES,
    config_value,
    enabled,
    is_up_to_date,
    lineage_fingerprint,
    read_manifest_at,
    stage_dir,
    stage_fingerprint,
)

log = logging.getLogger(__name__)

SCRATCH = "_scratch"


@dataclass(frozen=True)
class StageRun:
    """What a stage's run function gets: where to write and what it may build on."""

    config: Config
    name: str
    out: str
    """The folder being built (`_building/<stage>`): write every output here."""
    fingerprint: str
    lineage: str
    """The fingerprint without the stage's `extends` keys."""
    resumed: bool
    """`out` holds an unfinished attempt of the same lineage (a resumable stage continues it)."""
    current: str
    """The stage's current output folder (complete, or absent)."""
    extends: dict[str, Any] | None
    """The current output's manifest when it has the same lineage: a build may continue it."""

    def path(self, *parts: str) -> str:
        return join(self.out, *parts)

    @property
    def scratch(self) -> str:
        """Working space inside `out`, removed before the output is committed."""
        return join(self.out, SCRATCH)


@dataclass(frozen=True)
class StageOutcome:
    name: str
    path: str
    skipped: bool
    fingerprint: str


def run_function(name: str) -> Callable[[StageRun], dict[str, Any]]:
    module, _, function = STAGES[name].run.partition(":")
    return getattr(importlib.import_module(module), function)


def _up_to_date(config: Config, name: str, force_token: str | None) -> bool:
    """Up to date and not forced; or forced by this very submission, which already made it (a
    retried DAG task must not redo a forced stage it finished)."""
    if not is_up_to_date(config, name):
        return False
    return force_token is None or (read_manifest_at(stage_dir(config, name)) or {}).get("forced_by") == force_token


def _say_up_to_date(config: Config, name: str) -> StageOutcome:
    folder = stage_dir(config, name)
    log.info("%s: up to date in %s (same config and inputs); nothing to do", name, folder)
    print(f"{name}: up to date in {folder}; skipped (force it to run again)", flush=True)
    return StageOutcome(name, folder, True, (read_manifest_at(folder) or {}).get("fingerprint", ""))


def extends_values(config: Config, name: str) -> dict[str, Any]:
    return {key: config_value(config, key) for key in STAGES[name].extends}


def can_resume(marker: dict[str, Any], name: str, lineage: str, extends: dict[str, Any]) -> bool:
    """An unfinished build is resumed when its stage resumes, its lineage is this one and no
    `extends` key went down (a run past a lowered max_steps cannot be resumed to it)."""
    before = marker.get("extends") or {}
    return (
        STAGES[name].resumable
        and marker.get("lineage") == lineage
        and all(before.get(k) is None or v >= before[k] for k, v in extends.items())
    )


def _prepare_building(
    config: Config, run_dir: str, name: str, fingerprint: str, lineage: str, force_token: str | None, fence: Fence
) -> str:
    """`_building/<name>` ready to build into: "complete" (built but not swapped in), "resume" (an
    unfinished attempt it continues) or "new". An unfinished resumable build that is not resumed is
    set aside in `_previous/`, never deleted."""
    ensure_folder(join(run_dir, BUILDING))
    folder = building_dir(run_dir, name)
    orphan = keep_orphaned(run_dir, name, fence)
    if orphan is not None:
        print(
            f"{name}: {folder} had no marker (what a run that lost the run_dir's lease wrote after its build "
            f"was discarded); kept in {orphan}",
            flush=True,
        )
    refuse_unowned(folder, name)
    marker, extends = read_marker(folder), extends_values(config, name)
    holder = read_holder(run_dir)
    fields = {
        "stage": name,
        "run_id": (read_marker(run_dir) or {}).get("run_id"),
        "fingerprint": fingerprint,
        "lineage": lineage,
        "extends": extends,
        "forced_by": force_token,
        "made_by": {k: getattr(holder[0], k) for k in ("command", "host", "pid", "job")} if holder else None,
    }
    if marker is not None:
        mine = force_token is None or marker.get("forced_by") == force_token
        manifest = read_manifest_at(folder)
        if manifest is not None and manifest.get("fingerprint") == fingerprint and mine:
            return "complete"
        if manifest is None and mine and can_resume(marker, name, lineage, extends):
            write_marker(folder, "stage", **{**fields, "forced_by": marker.get("forced_by")})
            return "resume"
        if STAGES[name].resumable and manifest is None:
            aside = set_aside(run_dir, name, fence)
            print(f"{name}: the unfinished build of another config is kept in {aside}", flush=True)
        else:
            log.info("%s: discarding the build in %s (another config, or forced)", name, folder)
            own_folders(run_dir).delete(f"{BUILDING}/{name}", last=[MARKER])
    write_marker(folder, "stage", **fields)
    return "new"


def _build(
    config: Config, name: str, out: str, state: str, fingerprint: str, lineage: str, force_token: str | None
) -> None:
    """The stage's run function into `out`, then config.yaml and the manifest (last)."""
    current = stage_dir(config, name)
    current_manifest = read_manifest_at(current)
    extends = (
        current_manifest
        if STAGES[name].extends
        and force_token is None
        and current_manifest
        and current_manifest.get("lineage") == lineage
        else None
    )
    started = time.time()
    try:
        fields = run_function(name)(
            StageRun(config, name, out, fingerprint, lineage, state == "resume", current, extends)
        )
    except BaseException:
        if state == "new" and list_names(out) == [MARKER]:  # it failed before writing anything
            own_folders(config.run_dir).delete(f"{BUILDING}/{name}")
        raise
    own_folders(config.run_dir).delete(f"{BUILDING}/{name}/{SCRATCH}")
    write_text(join(out, "config.yaml"), dump_yaml(config))
    write_json(
        join(out, MANIFEST),
        {
            **fields,
            "stage": name,
            "fingerprint": fingerprint,
            "lineage": lineage,
            "forced_by": force_token,
            "seconds": time.time() - started,
            "committed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    )


def run_stage(config: Config, name: str, force: bool | str = False, owner: str | None = None) -> StageOutcome:
    """Run one stage through the lifecycle. `force`: rebuild even when up to date (a string is the
    submission's token: a retry of the same submission resumes what it began); `owner`: the lease
    holder, when a DAG driver holds the lease for this stage task. A stage with a publish target
    (predict.output) has it checked before anything runs and the committed output copied there,
    also when the output was up to date."""
    check_target(config, name)
    outcome = _run_stage(config, name, force, owner)
    publish(config, name, outcome.path, owner)
    return outcome


def _run_stage(config: Config, name: str, force: bool | str, owner: str | None) -> StageOutcome:
    force_token = (uuid.uuid4().hex if force is True else force) or None
    stage = STAGES[name]
    if not enabled(config, name):
        raise ConfigError(f"the {name} stage needs {stage.enabled_by} (it is null in this config)")
    run_dir = check_run_dir(config.run_dir)
    check_input_paths(config, [name, *stage.builds_inputs])
    for dep in stage.builds_inputs:
        if not is_up_to_date(config, dep):
            log.info("%s: the %s stage's output is missing or out of date: building it first", name, dep)
            run_stage(config, dep, owner=owner)
    if _up_to_date(config, name, force_token):
        return _say_up_to_date(config, name)
    ensure_run_dir(run_dir)
    with hold(run_dir, owner) as lease:
        fence = Fence(run_dir, lease, owner)
        finish_interrupted_swap(run_dir, fence)
        refuse_unowned(stage_dir(config, name), name)
        fingerprint, lineage = stage_fingerprint(config, name), lineage_fingerprint(config, name)
        if _up_to_date(config, name, force_token):  # another run finished it meanwhile
            return _say_up_to_date(config, name)
        state = _prepare_building(config, run_dir, name, fingerprint, lineage, force_token, fence)
        out = building_dir(run_dir, name)
        if state != "complete":
            _build(config, name, out, state, fingerprint, lineage, force_token)
        commit(run_dir, name, fence)  # fenced: a run that lost the lease meanwhile commits nothing
    return StageOutcome(name, stage_dir(config, name), False, fingerprint)


def stage_runner(name: str) -> Callable[..., str]:
    """`run_<stage>(config, force=False) -> folder`: the stage through the lifecycle, as a function."""

    def run(config: Config, force: bool = False) -> str:
        return run_stage(config, name, force).path

    run.__name__ = run.__qualname__ = f"run_{name}"
    run.__doc__ = f"Run the {name} stage ({STAGES[name].summary}) into {{run_dir}}/{name}/; returns the folder."
    return run


__all__ = [
    "SCRATCH",
    "StageOutcome",
    "StageRun",
    "can_resume",
    "extends_values",
    "run_function",
    "run_stage",
    "stage_runner",
]
