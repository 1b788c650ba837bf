"""The one lifecycle every stage runs through: ownership, up to date, lease, build beside, swap.

Layout of a run_dir (documented in the README):

    .albert-ray.json        marker: albert-ray made (or adopted) this folder
    _lease.json             the lease of the run writing here (pipelines/lease.py)
    <stage>/                the stage's current output: marker, outputs, config.yaml, manifest.json (last)
    _building/<stage>/      its next output while that is built; an unfinished pretraining resumes from it
    _previous/<stage>/      the output it replaced, kept until the next replacement is complete
    _swap.json              the journal of a swap in progress (the next run finishes an interrupted one)
    costs/<stage>.json      what the DAG measured

The product deletes or replaces a folder only when it carries the marker, and refuses before any
work: a run_dir that is a filesystem root, the home folder or a bucket root; an existing non-empty
run_dir or stage folder without the marker; an input path inside an output a run may replace.
A new output is built in `_building/<stage>/` and swapped in when complete; the output it
replaces becomes `_previous/<stage>/` (`python -m pipelines.restore STAGE` swaps them back).
"""
from __future__ import annotations

import importlib
import logging
import os
import posixpath
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .config import RunConfig, dump_yaml
from .errors import MissingInput, RefusedPath
from .lease import check_owner, hold, read_holder
from .stages import (MANIFEST, STAGES, config_value, is_up_to_date, lineage_fingerprint, read_manifest_at,
                     stage_dir, stage_fingerprint)
from .storage import (delete_tree, exists, filesystem, is_remote, join, list_names, move_tree, read_json, resolve_pkg,
                      write_json, write_text)

log = logging.getLogger(__name__)

MARKER = ".albert-ray.json"
TOOL = "albert-ray"
BUILDING = "_building"
PREVIOUS = "_previous"
SWAP = "_swap.json"
SCRATCH = "_scratch"
CONTROL_FILES = {"_lease.json", "_lease.json.lock", SWAP, SWAP + ".lock"}


# ---- paths and ownership --------------------------------------------------------------------------

def canonical(path: str) -> str:
    """An absolute local path, or s3://bucket/prefix without a trailing slash."""
    path = resolve_pkg(path)
    if is_remote(path):
        scheme, _, rest = path.partition("://")
        return f"{scheme}://{rest.strip('/')}"
    return os.path.abspath(os.path.expanduser(path))


def path_inside(root: str, path: str) -> str | None:
    """`path` relative to `root` ("." for root itself), or None when it lies outside."""
    root, path = canonical(root), canonical(path)
    if is_remote(root) != is_remote(path):
        return None
    rel = posixpath.relpath(path, root) if is_remote(root) else os.path.relpath(path, root)
    return None if rel == ".." or rel.startswith("../") else rel.replace(os.sep, "/")


def read_marker(folder: str) -> dict[str, Any] | None:
    try:
        marker = read_json(join(folder, MARKER))
    except ValueError:
        return None
    return marker if isinstance(marker, dict) and marker.get("tool") == TOOL else None


def write_marker(folder: str, kind: str, **fields: Any) -> None:
    write_json(join(folder, MARKER), {"tool": TOOL, "kind": kind, **fields,
                                      "created": datetime.now(timezone.utc).isoformat(timespec="seconds")})


def owned(folder: str, stage: str | None = None) -> bool:
    """Whether albert-ray made this folder (for `stage`, when given)."""
    marker = read_marker(folder)
    return marker is not None and (stage is None or marker.get("stage") == stage)


def refuse_unowned(folder: str, stage: str | None = None) -> None:
    """Raise RefusedPath when the folder exists and albert-ray did not make it."""
    if exists(folder) and not owned(folder, stage):
        what = f"the {stage} stage's" if stage else "albert-ray's"
        raise RefusedPath(f"{folder} exists but is not {what} (no {MARKER} marker naming it): refusing to replace "
                          "or delete it; move it away or choose another run_dir")


def check_run_dir(run_dir: str) -> str:
    """The canonical run_dir, or RefusedPath: a filesystem root, the home folder, a bucket root, or an
    existing non-empty folder holding anything albert-ray did not make."""
    path = canonical(run_dir)
    if is_remote(path):
        if "/" not in path.partition("://")[2]:
            raise RefusedPath(f"run_dir={run_dir}: a bucket root; use a prefix inside it (s3://bucket/runs/name)")
    else:
        if os.path.dirname(path) == path:
            raise RefusedPath(f"run_dir={run_dir}: a filesystem root; use a folder of its own")
        if path == os.path.abspath(os.path.expanduser("~")):
            raise RefusedPath(f"run_dir={run_dir}: the home folder; use a folder of its own (e.g. ~/albert-runs/name)")
        if os.path.exists(path) and not os.path.isdir(path):
            raise RefusedPath(f"run_dir={run_dir}: a file, not a folder")
    if owned(path):
        return path
    names = list_names(path)
    foreign = [n for n in names if n not in CONTROL_FILES and not owned(join(path, n))]
    if foreign:
        shown = ", ".join(n + ("/" if _is_dir(join(path, n)) else "") for n in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise RefusedPath(f"run_dir={run_dir}: exists, is not empty and was not made by albert-ray (no {MARKER}): it "
                          f"holds {shown}{more}; refusing to write there. Use a new or empty folder")
    return path


def _is_dir(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.isdir(p)


def ensure_run_dir(run_dir: str) -> None:
    """Create run_dir (or adopt an empty one, or one holding only albert-ray's folders) with its marker."""
    if not owned(run_dir):
        fs, p = filesystem(run_dir)
        fs.makedirs(p, exist_ok=True)
        write_marker(run_dir, "run", run_id=uuid.uuid4().hex)


def ensure_folder(folder: str, kind: str = "folder") -> None:
    """A folder of albert-ray's own (costs/, _building/, _previous/): refused when it exists without
    the marker, created with it otherwise."""
    refuse_unowned(folder)
    if not owned(folder):
        write_marker(folder, kind)


def check_input_paths(config: RunConfig, names: Sequence[str]) -> None:
    """Input paths that do not exist (MissingInput), and those that lie where a run replaces or
    deletes things (RefusedPath): in the stage's own output
    or a later stage's (a cycle), in _building/ or _previous/, or the run_dir itself; and a corpus
    path holding the run_dir (the corpus would read the run's own outputs)."""
    run_dir = canonical(config.run_dir)
    for name in names:
        stage = STAGES[name]
        for key in stage.input_paths:
            value = config_value(config, key)
            for path in value if isinstance(value, list) else [value] if value else []:
                if not any(c in path for c in "*?[") and not exists(path):
                    raise MissingInput(f"{key}: {path} does not exist")
                rel = path_inside(run_dir, path)
                if rel is not None:
                    first = rel.split("/", 1)[0]
                    replaced = (first in (BUILDING, PREVIOUS, ".") or
                                (first in STAGES and list(STAGES).index(first) >= list(STAGES).index(name)))
                    if replaced:
                        where = join(run_dir, first) if first != "." else run_dir
                        raise RefusedPath(f"{key}={path}: lies inside {where}, which a run on run_dir="
                                          f"{config.run_dir} replaces (the {name} stage reads it); use a copy "
                                          "outside, or another run_dir")
                elif key == "corpus.paths" and path_inside(path, run_dir) is not None:
                    raise RefusedPath(f"{key}={path}: holds run_dir={config.run_dir}, so the corpus would include the "
                                      "run's own outputs; put the run_dir elsewhere")


# ---- generations: build beside, swap in, keep one previous ----------------------------------------

def building_dir(run_dir: str, name: str) -> str:
    return join(run_dir, BUILDING, name)


def previous_dir(run_dir: str, name: str) -> str:
    return join(run_dir, PREVIOUS, name)


def _move(src: str, dst: str, into_current: bool) -> dict[str, Any]:
    # Object stores move object by object: a folder becomes complete when its manifest arrives (last)
    # and stops being complete when its manifest leaves (first); its marker leaves last.
    order = {"first": [MARKER], "last": [MANIFEST]} if into_current else {"first": [MANIFEST], "last": [MARKER]}
    return {"op": "move", "src": src, "dst": dst, **order}


def _run_journal(run_dir: str, journal: dict[str, Any]) -> None:
    """Carry out a swap journal's remaining operations, recording each, then remove the journal."""
    path = join(run_dir, SWAP)
    for i in range(journal["done"], len(journal["ops"])):
        op = journal["ops"][i]
        if op["op"] == "delete":
            delete_tree(join(run_dir, op["path"]), last=[MARKER])
        else:
            src, dst = join(run_dir, op["src"]), join(run_dir, op["dst"])
            if exists(src):
                move_tree(src, dst, first=op["first"], last=op["last"])
        journal["done"] = i + 1
        write_json(path, journal)
    fs, p = filesystem(path)
    fs.rm(p)


def finish_interrupted_swap(run_dir: str) -> None:
    """A swap interrupted by a crash (its journal is still there) is finished before anything else."""
    journal = read_json(join(run_dir, SWAP))
    if journal:
        log.warning("finishing the interrupted %s of the %s stage in %s", journal.get("action"), journal.get("stage"),
                    run_dir)
        print(f"{journal.get('stage')}: finishing an interrupted {journal.get('action')} in {run_dir}", flush=True)
        _run_journal(run_dir, journal)


def _swap(run_dir: str, name: str, action: str, ops: list[dict[str, Any]]) -> None:
    for op in ops:  # every folder touched must be ours before the first change
        for key in ("path", "src"):
            if key in op:
                refuse_unowned(join(run_dir, op[key]), name)
    journal = {"stage": name, "action": action, "ops": ops, "done": 0}
    write_json(join(run_dir, SWAP), journal)
    _run_journal(run_dir, journal)


def commit(run_dir: str, name: str) -> None:
    """Swap the complete `_building/<name>` in: the current output becomes `_previous/<name>`, which
    replaces (deletes) the generation before it."""
    current, previous, building = name, f"{PREVIOUS}/{name}", f"{BUILDING}/{name}"
    ops = []
    if exists(join(run_dir, previous)):
        ops.append({"op": "delete", "path": previous})
    if exists(join(run_dir, current)):
        ensure_folder(join(run_dir, PREVIOUS))
        ops.append(_move(current, previous, into_current=False))
    ops.append(_move(building, current, into_current=True))
    _swap(run_dir, name, "commit", ops)


def restore(config: RunConfig, name: str) -> str:
    """Swap `_previous/<name>` and `<name>`: the previous output becomes current and the current one
    previous, so a second restore undoes the first. Returns the restored folder."""
    run_dir = check_run_dir(config.run_dir)
    with hold(run_dir):
        finish_interrupted_swap(run_dir)
        previous = previous_dir(run_dir, name)
        if read_manifest_at(previous) is None:
            raise MissingInput(f"{previous}: no complete previous output of the {name} stage to restore")
        stash = f"{PREVIOUS}/{name}.restoring"
        ops = [_move(f"{PREVIOUS}/{name}", stash, into_current=False)]
        if exists(stage_dir(config, name)):
            ops.append(_move(name, f"{PREVIOUS}/{name}", into_current=False))
        ops.append(_move(stash, name, into_current=True))
        _swap(run_dir, name, "restore", ops)
    return stage_dir(config, name)


# ---- running a stage ------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageRun:
    """What a stage's run function gets: where to write and what it may build on."""

    config: RunConfig
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


def _say_up_to_date(config: RunConfig, name: str) -> StageOutcome:
    folder = stage_dir(config, name)
    log.info("%s: up to date in %s (same config and inputs); nothing to do", name, folder)
    print(f"{name}: up to date in {folder}; skipped (force it to run again)", flush=True)
    manifest = read_manifest_at(folder) or {}
    return StageOutcome(name, folder, True, manifest.get("fingerprint", ""))


def _stage_marker(run_dir: str, name: str, fingerprint: str, lineage: str) -> dict[str, Any]:
    """What a stage folder's marker says: the stage, the run_dir's id, the run that made it."""
    holder = read_holder(run_dir)
    made_by = {k: getattr(holder[0], k) for k in ("command", "host", "pid", "job")} if holder else None
    return {"stage": name, "run_id": (read_marker(run_dir) or {}).get("run_id"), "made_by": made_by,
            "fingerprint": fingerprint, "lineage": lineage}


def _prepare_building(run_dir: str, name: str, fingerprint: str, lineage: str, force: bool) -> str:
    """`_building/<name>` ready to build into: "complete" (built but not swapped in), "resume" (an
    unfinished attempt of this lineage, for a resumable stage) or "new"."""
    ensure_folder(join(run_dir, BUILDING))
    folder = building_dir(run_dir, name)
    refuse_unowned(folder, name)
    marker = read_marker(folder)
    if marker is not None:
        manifest = read_manifest_at(folder)
        if manifest is not None and manifest.get("fingerprint") == fingerprint and not force:
            return "complete"
        if STAGES[name].resumable and not force and manifest is None and marker.get("lineage") == lineage:
            write_marker(folder, "stage", **_stage_marker(run_dir, name, fingerprint, lineage))
            return "resume"
        log.info("%s: discarding the unfinished build in %s (%s)", name, folder,
                 "forced" if force else "another config or inputs")
        delete_tree(folder, last=[MARKER])
    write_marker(folder, "stage", **_stage_marker(run_dir, name, fingerprint, lineage))
    return "new"


def run_stage(config: RunConfig, name: str, force: bool = False, owner: str | None = None) -> StageOutcome:
    """Run one stage through the lifecycle; `owner` is the lease holder when a DAG driver holds it."""
    stage = STAGES[name]
    run_dir = check_run_dir(config.run_dir)
    check_input_paths(config, [name, *stage.builds_inputs])
    for dep in stage.builds_inputs:
        if not is_up_to_date(config, dep):
            log.info("%s: the %s stage's output is missing or out of date: building it first", name, dep)
            run_stage(config, dep, owner=owner)
    if not force and is_up_to_date(config, name):
        return _say_up_to_date(config, name)
    ensure_run_dir(run_dir)
    with hold(run_dir, owner) as lease:
        finish_interrupted_swap(run_dir)
        current = stage_dir(config, name)
        refuse_unowned(current, name)
        fingerprint, lineage = stage_fingerprint(config, name), lineage_fingerprint(config, name)
        if not force and is_up_to_date(config, name):  # another run finished it meanwhile
            return _say_up_to_date(config, name)
        state = _prepare_building(run_dir, name, fingerprint, lineage, force)
        out = building_dir(run_dir, name)
        if state != "complete":
            started = time.time()
            current_manifest = read_manifest_at(current)
            extends = (current_manifest if stage.extends and not force and current_manifest
                       and current_manifest.get("lineage") == lineage else None)
            try:
                fields = run_function(name)(StageRun(config, name, out, fingerprint, lineage, state == "resume",
                                                     current, extends))
            except BaseException:
                if state == "new" and list_names(out) == [MARKER]:  # it failed before writing anything
                    delete_tree(out)
                raise
            if exists(join(out, SCRATCH)):
                delete_tree(join(out, SCRATCH))
            write_text(join(out, "config.yaml"), dump_yaml(config))
            write_json(join(out, MANIFEST), {**fields, "stage": name, "fingerprint": fingerprint, "lineage": lineage,
                                             "committed": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                             "seconds": time.time() - started})
        if lease is not None:
            lease.check()
        elif owner is not None:
            check_owner(run_dir, owner)
        commit(run_dir, name)
    return StageOutcome(name, current, False, fingerprint)


def stage_runner(name: str) -> Callable[..., str]:
    """`run_<stage>(config, force=False) -> folder`: the stage through the lifecycle, as a function."""
    def run(config: RunConfig, force: bool = False) -> str:
        return run_stage(config, name, force).path

    run.__name__ = run.__qualname__ = f"run_{name}"
    run.__doc__ = f"Run the {name} stage ({STAGES[name].summary}) into {{run_dir}}/{name}/; returns the folder."
    return run


__all__ = ["BUILDING", "MARKER", "PREVIOUS", "SWAP", "StageOutcome", "StageRun", "building_dir", "canonical",
           "check_input_paths", "check_run_dir", "commit", "ensure_folder", "ensure_run_dir", "finish_interrupted_swap",
           "owned", "path_inside", "previous_dir", "read_marker", "refuse_unowned", "restore", "run_function",
           "run_stage", "stage_runner"]
