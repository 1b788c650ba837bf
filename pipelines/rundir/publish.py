"""A committed stage output published to a folder outside the run_dir (`predict.output`): a copy of
the stage's folder, for the tools that read predictions from a place of their own choosing.

The run_dir keeps the stage's own output (what the DAG checks, skips and resumes); the published
folder is a copy, rewritten when the output changes and left alone when it is the same. It is
written only where nothing else could be lost: an absent or empty folder, or one that this run_dir
published before (`.albert-ray-published.json` lists the files it wrote there, and only those are
ever replaced). The marker comes first and says `publishing`; the stage's manifest.json is copied
last and the marker then says `complete`, both under the run_dir's lease: a reader trusts the
folder when its marker is complete.

The marker is a file in a folder anyone may write to: every name it lists is checked, and every
file written or deleted there goes through pipelines/storage/contained.py, so a forged marker or a
link planted in the folder cannot reach a file outside it.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any

from ..config import Config
from ..errors import BadInput, RefusedPath
from ..storage import canonical, filesystem, is_remote, join, key_relpath, list_names, path_inside, read_json
from ..storage.contained import Contained
from .lease import Fence, hold
from .ownership import MARKER, read_marker
from .registry import MANIFEST, STAGES, config_value

PUBLISHED = ".albert-ray-published.json"


def publish_key(name: str) -> str | None:
    return STAGES[name].publish


def target(config: Config, name: str) -> str | None:
    """The folder the stage's output is published to, or None."""
    key = publish_key(name)
    value = config_value(config, key) if key else None
    return canonical(value) if value else None


def check_target(config: Config, name: str) -> None:
    """Before the stage runs: refuse a folder inside the run_dir (or holding it), one that overlaps a
    path the stage reads, and one holding files this run_dir did not publish there."""
    folder = target(config, name)
    if folder is None:
        return
    key, run_dir = publish_key(name), canonical(config.run_dir)
    if path_inside(run_dir, folder) is not None or path_inside(folder, run_dir) is not None:
        raise RefusedPath(
            f"{key}={folder}: overlaps run_dir={config.run_dir}, where the stage's output already is "
            f"({join(run_dir, name)}); leave {key} null, or name a folder outside the run_dir"
        )
    for read in STAGES[name].input_paths:
        value = config_value(config, read)
        if value and (path_inside(value, folder) is not None or path_inside(folder, value) is not None):
            raise RefusedPath(f"{key}={folder}: overlaps {read}={value}, which the stage reads; name another folder")
    if not is_remote(folder) and os.path.lexists(folder) and not os.path.isdir(folder):
        raise RefusedPath(f"{key}={folder}: a file, not a folder; name a folder (absent, empty, or published before)")
    marker = _marker(folder)
    names = [n for n in list_names(folder) if n != PUBLISHED]
    if marker is None and names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise RefusedPath(
            f"{key}={folder} holds files albert-ray did not publish ({shown}); name an empty or new "
            "folder: nothing there is overwritten"
        )
    if marker is not None and marker.get("run_dir") != run_dir:
        raise RefusedPath(
            f"{key}={folder} holds the {marker.get('stage')} output published from run_dir="
            f"{marker.get('run_dir')}; name another folder (or remove that one) to publish this run's"
        )


def _inside(folder: str) -> Contained:
    """The published folder as the root of every name its marker lists."""
    return Contained(folder, join(folder, PUBLISHED))


def _marker(folder: str) -> dict[str, Any] | None:
    """The folder's publish marker, checked: a JSON object whose `files` are plain relative paths
    inside the folder, reached through no link; None when there is none."""
    inside = _inside(folder)
    data = inside.read_bytes(PUBLISHED)
    if data is None:
        return None
    try:
        marker = json.loads(data)
    except ValueError:
        marker = None
    if (
        not isinstance(marker, dict)
        or not isinstance(marker.get("files", []), list)
        or not all(isinstance(marker.get(k, ""), str) for k in ("run_dir", "stage", "state"))
    ):
        raise BadInput(
            f"{inside.origin} is not a publish marker albert-ray wrote (unreadable, or its fields have "
            "the wrong types); nothing there was changed: remove it, or name another folder"
        )
    for name in marker.get("files", []):
        inside.path(name)
    return marker


def _files(folder: str) -> list[str]:
    """The stage folder's files as relative paths, its ownership marker left out, manifest.json last."""
    fs, root = filesystem(folder)
    found = [key_relpath(f, root) for f in fs.find(root)] if fs.exists(root) else []
    found = [f for f in found if f not in (MARKER, MANIFEST) and not f.endswith("/")]
    return sorted(found) + [MANIFEST]


def _write_marker(inside: Contained, marker: dict[str, Any]) -> None:
    with inside.open_write(PUBLISHED) as f:
        f.write((json.dumps(marker, indent=2, sort_keys=True) + "\n").encode())


def publish(config: Config, name: str, stage_folder: str, owner: str | None = None) -> str | None:
    """Copy the committed `stage_folder` to the stage's publish target (checked again first);
    returns the target, or None when the stage has none."""
    folder = target(config, name)
    if folder is None:
        return None
    check_target(config, name)
    manifest = read_json(join(stage_folder, MANIFEST))
    marker, inside = _marker(folder), _inside(folder)
    files = _files(stage_folder)
    fields = {
        "stage": name,
        "run_dir": canonical(config.run_dir),
        "run_id": (read_marker(config.run_dir) or {}).get("run_id"),
        "source": stage_folder,
        "fingerprint": manifest.get("fingerprint"),
        "committed": manifest.get("committed"),
        "files": files,
    }
    key = publish_key(name)
    if (
        marker is not None
        and marker.get("state") == "complete"
        and all(marker.get(k) == fields[k] for k in ("fingerprint", "committed", "files"))
        and all(inside.exists(f) for f in files)
    ):
        print(f"{name}: {key}={folder} already holds this output", flush=True)
        return folder
    earlier = list((marker or {}).get("files") or [])
    with hold(config.run_dir, owner) as lease:
        fence = Fence(config.run_dir, lease, owner)
        with fence.held():
            fence.check()
            _write_marker(inside, {**fields, "files": sorted(set(earlier) | set(files)), "state": "publishing"})
        # what this run_dir published there before, manifest first: never a file it did not write
        for rel in [f for f in [MANIFEST, *earlier] if f == MANIFEST or f not in files]:
            inside.remove_file(rel)
        for rel in files[:-1]:
            inside.copy_in(join(stage_folder, rel), rel)
        with fence.held():
            fence.check()
            inside.copy_in(join(stage_folder, MANIFEST), MANIFEST)
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            _write_marker(inside, {**fields, "state": "complete", "published": stamp})
    print(f"{name}: published to {key}={folder} ({len(files)} files)", flush=True)
    return folder


__all__ = ["PUBLISHED", "check_target", "publish", "target"]
