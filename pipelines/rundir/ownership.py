"""What albert-ray owns: folders carrying its marker, and the checks that refuse, before any work,
every path a run must not write into, delete, or read from while replacing it.

A folder the product creates carries `.albert-ray.json` (tool, kind, stage, run). Kinds: `run` (a
run_dir), `stage` (a stage's output, current, building or previous), `folder` (`_building/`,
`_previous/`, `costs/`). A symbolic link is never owned: a link to another run's output is not
ours to delete. Nothing here deletes anything; pipelines/rundir/generations.py does, on owned folders.
"""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timezone
from typing import Any

from ..config import Config
from ..errors import MissingInput, RefusedPath
from ..storage import canonical, exists, filesystem, is_remote, join, list_names, path_inside, read_json, write_json
from .registry import STAGES, config_value, unit_configs

MARKER = ".albert-ray.json"
TOOL = "albert-ray"
BUILDING = "_building"
PREVIOUS = "_previous"
CONTROL_FILES = {"_lease.json", "_lease.json.lock", "_swap.json", "_swap.json.lock"}
ADOPTABLE_KINDS = ("stage", "folder")


def read_marker(folder: str) -> dict[str, Any] | None:
    if not is_remote(folder) and os.path.islink(filesystem(folder)[1]):
        return None
    try:
        marker = read_json(join(folder, MARKER))
    except ValueError:
        return None
    return marker if isinstance(marker, dict) and marker.get("tool") == TOOL else None


def write_marker(folder: str, kind: str, **fields: Any) -> None:
    write_json(
        join(folder, MARKER),
        {"tool": TOOL, "kind": kind, **fields, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")},
    )


def owned(folder: str, stage: str | None = None, kind: str | None = None) -> bool:
    """Whether albert-ray made this folder (of this kind, for this stage, when given)."""
    marker = read_marker(folder)
    return (
        marker is not None
        and (stage is None or marker.get("stage") == stage)
        and (kind is None or marker.get("kind") == kind)
    )


def refuse_unowned(folder: str, stage: str | None = None) -> None:
    """Raise RefusedPath when the folder (or a link by its name) exists and albert-ray did not make it."""
    linked = not is_remote(folder) and os.path.islink(filesystem(folder)[1])
    if (linked or exists(folder)) and not owned(folder, stage):
        what = f"the {stage} stage's" if stage else "albert-ray's"
        raise RefusedPath(
            f"{folder} exists but is not {what} (no {MARKER} marker naming it"
            f"{'; it is a link' if linked else ''}): refusing to replace or delete it; move it away "
            "or choose another run_dir"
        )


def _ancestors(path: str) -> list[str]:
    """The folders above a canonical path, nearest first, up to the filesystem root or the bucket."""
    if is_remote(path):
        scheme, _, rest = path.partition("://")
        parts = rest.split("/")
        return [f"{scheme}://{'/'.join(parts[:i])}" for i in range(len(parts) - 1, 0, -1)]
    found, parent = [], os.path.dirname(path)
    while parent != path:
        found.append(parent)
        path, parent = parent, os.path.dirname(parent)
    return found


def check_run_dir(run_dir: str) -> str:
    """The canonical run_dir, or RefusedPath: a filesystem root, the home folder, a bucket root, a
    folder inside albert-ray's outputs, or an existing folder holding anything albert-ray did not
    make (one holding only its stage folders is adopted)."""
    path = canonical(run_dir)
    if is_remote(path):
        if "/" not in path.partition("://")[2]:
            raise RefusedPath(f"run_dir={run_dir}: a bucket root; use a prefix inside it (s3://bucket/runs/name)")
    else:
        if os.path.dirname(path) == path:
            raise RefusedPath(f"run_dir={run_dir}: a filesystem root; use a folder of its own")
        if path == os.path.realpath(os.path.expanduser("~")):
            raise RefusedPath(f"run_dir={run_dir}: the home folder; use a folder of its own (e.g. ~/albert-runs/name)")
        if os.path.exists(path) and not os.path.isdir(path):
            raise RefusedPath(f"run_dir={run_dir}: a file, not a folder")
    marker = read_marker(path)
    if marker is not None:
        if marker.get("kind") != "run":
            raise RefusedPath(
                f"run_dir={run_dir}: albert-ray's {marker.get('stage') or marker.get('kind')} "
                "output inside another run_dir, not a run_dir; use a folder of its own"
            )
        return path
    ancestor = next((a for a in _ancestors(path) if read_marker(a) is not None), None)
    if ancestor is not None:
        raise RefusedPath(f"run_dir={run_dir}: lies inside {ancestor}, which albert-ray made; use a folder of its own")
    names = list_names(path)
    foreign = [
        n
        for n in names
        if n not in CONTROL_FILES and (read_marker(join(path, n)) or {}).get("kind") not in ADOPTABLE_KINDS
    ]
    if foreign:
        fs, _ = filesystem(path)
        shown = ", ".join(n + ("/" if fs.isdir(filesystem(join(path, n))[1]) else "") for n in foreign[:5])
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise RefusedPath(
            f"run_dir={run_dir}: exists, is not empty and was not made by albert-ray (no {MARKER}): it "
            f"holds {shown}{more}; refusing to write there. Use a new or empty folder"
        )
    return path


def ensure_run_dir(run_dir: str) -> None:
    """Create run_dir (or adopt an empty one, or one holding only albert-ray's folders) with its
    marker. A missing bucket is an error: albert-ray creates no buckets."""
    if owned(run_dir, kind="run"):
        return
    fs, path = filesystem(run_dir)
    if is_remote(run_dir):
        bucket = path.partition("/")[0]
        if not fs.exists(bucket):
            raise MissingInput(f"run_dir={run_dir}: bucket {bucket} does not exist (albert-ray creates no buckets)")
    try:
        if not is_remote(run_dir):
            os.makedirs(path, exist_ok=True)
        write_marker(run_dir, "run", run_id=uuid.uuid4().hex)
    except OSError as e:
        raise RefusedPath(f"run_dir={run_dir}: cannot write there: {e.strerror or e}") from None


def ensure_folder(folder: str) -> None:
    """A folder of albert-ray's own (costs/, _building/, _previous/): refused when it exists without
    the marker, created with it otherwise."""
    refuse_unowned(folder)
    if not owned(folder):
        write_marker(folder, "folder")


def _glob_root(path: str) -> str:
    """The part of a path before its first glob character (the folder a glob searches)."""
    cut = min((path.index(c) for c in "*?[" if c in path), default=len(path))
    return path if cut == len(path) else path[:cut].rsplit("/", 1)[0] or "/"


def _input_values(config: Config, name: str) -> list[tuple[str, Any]]:
    """The stage's input path keys with their values, its units' (an evaluation suite's tasks) included."""
    found = [(key, config_value(config, key)) for key in STAGES[name].input_paths]
    for unit, unit_config in unit_configs(config, name).items():
        found += [
            (f"{STAGES[name].units}.{unit}: {key}", config_value(unit_config, key)) for key in STAGES[name].input_paths
        ]
    return found


def check_input_paths(config: Config, names: list[str]) -> None:
    """Input paths that do not exist (MissingInput), and those that lie where a run replaces or
    deletes things (RefusedPath): in the reading stage's own output or a later stage's (a cycle),
    in _building/ or _previous/, or the run_dir itself; and a corpus path holding the run_dir (the
    corpus would read the run's own outputs). An earlier stage's output is a fine input: the run
    makes it before the reading stage starts."""
    run_dir = canonical(config.run_dir)
    order = list(STAGES)
    for name in names:
        for key, value in _input_values(config, name):
            for path in (
                value
                if isinstance(value, list)
                else list(value.values())
                if isinstance(value, dict)
                else [value]
                if value
                else []
            ):
                rel = path_inside(run_dir, path)
                first = rel.split("/", 1)[0] if rel is not None else None
                if first in (BUILDING, PREVIOUS, ".") or (first in STAGES and order.index(first) >= order.index(name)):
                    where = join(run_dir, first) if first != "." else run_dir
                    raise RefusedPath(
                        f"{key}={path}: lies inside {where}, which a run on run_dir={config.run_dir} "
                        f"replaces (the {name} stage reads it); use a copy outside, or another run_dir"
                    )
                if first not in STAGES and not any(c in path for c in "*?[") and not exists(path):
                    raise MissingInput(f"{key}: {path} does not exist")
                if key == "corpus.paths" and rel is None and path_inside(_glob_root(path), run_dir) is not None:
                    raise RefusedPath(
                        f"{key}={path}: holds run_dir={config.run_dir}, so the corpus would include the "
                        "run's own outputs; put the run_dir elsewhere"
                    )


__all__ = [
    "BUILDING",
    "CONTROL_FILES",
    "MARKER",
    "PREVIOUS",
    "check_input_paths",
    "check_run_dir",
    "ensure_folder",
    "ensure_run_dir",
    "owned",
    "read_marker",
    "refuse_unowned",
    "write_marker",
]
