"""A stage's generations: the next output built in `_building/<stage>/`, swapped in when complete,
the replaced one kept in `_previous/<stage>/`; restore swaps those two back.

Every swap is a journal, `{run_dir}/_swap.json`: the list of deletes and moves, and how many are
done, written before the first and after each. A swap interrupted by a crash is finished by the
next run, so an output is never half here and half there for longer than that. Only folders
carrying albert-ray's marker are moved or deleted, checked for every folder before the first
change. A journal read back is a file of the run_dir, which anyone with write access could have
edited: it is replayed only if every path in it has the shape a swap writes (`<stage>`,
`_building/<stage>`, `_previous/<stage>[.suffix]`) and resolves inside the run_dir.
"""

from __future__ import annotations

import logging
from typing import Any

from .errors import BadInput, MissingInput
from .lease import hold
from .ownership import BUILDING, MARKER, PREVIOUS, check_run_dir, ensure_folder, owned, refuse_unowned
from .stages import MANIFEST, read_manifest_at
from .storage import delete_tree, exists, filesystem, join, move_tree, path_inside, read_json, write_json

log = logging.getLogger(__name__)

SWAP = "_swap.json"


def building_dir(run_dir: str, name: str) -> str:
    return join(run_dir, BUILDING, name)


def previous_dir(run_dir: str, name: str) -> str:
    return join(run_dir, PREVIOUS, name)


def _run_journal(run_dir: str, journal: dict[str, Any]) -> None:
    """Carry out a journal's remaining operations, recording each, then remove the journal."""
    path = join(run_dir, SWAP)
    for i in range(journal["done"], len(journal["ops"])):
        op = journal["ops"][i]
        if op["op"] == "delete":
            delete_tree(join(run_dir, op["path"]), last=[MARKER])
        else:
            src, dst = join(run_dir, op["src"]), join(run_dir, op["dst"])
            if exists(src):
                # a folder is complete when its manifest arrives (last) and stops being complete
                # when it leaves (first); both sides keep their marker throughout
                move_tree(src, dst, complete_last=[MANIFEST], owner_first=[MARKER])
        journal["done"] = i + 1
        write_json(path, journal)
    fs, p = filesystem(path)
    fs.rm(p)


def _refuse_journal(path: str, why: str) -> BadInput:
    return BadInput(f"{path}: {why}; nothing was moved or deleted: check it, then remove {path} by hand")


def check_journal(run_dir: str, journal: Any) -> None:
    """A journal read from the run_dir is one a swap could have written, every path inside the run_dir."""
    path = join(run_dir, SWAP)
    ops = journal.get("ops") if isinstance(journal, dict) else None
    done = journal.get("done") if isinstance(journal, dict) else None
    if not isinstance(ops, list) or not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= len(ops):
        raise _refuse_journal(path, "not a swap journal (ops, done)")
    for op in ops:
        keys = {"delete": ("path",), "move": ("src", "dst")}.get(op.get("op")) if isinstance(op, dict) else None
        if keys is None or set(op) != {"op", *keys}:
            raise _refuse_journal(path, f"operation {op!r} is not a delete or a move")
        for key in keys:
            rel = op[key]
            parts = rel.split("/") if isinstance(rel, str) else []
            shaped = (len(parts) == 1 or (len(parts) == 2 and parts[0] in (BUILDING, PREVIOUS))) and all(
                p and p not in (".", "..") and "\\" not in p and ":" not in p for p in parts
            )
            if not shaped or path_inside(run_dir, join(run_dir, rel)) in (None, "."):
                raise _refuse_journal(path, f"{key}={rel!r} is not a stage folder inside {run_dir}")


def finish_interrupted_swap(run_dir: str) -> None:
    """A swap interrupted by a crash (its journal is still there) is finished before anything else."""
    path = join(run_dir, SWAP)
    try:
        journal = read_json(path)
    except ValueError:
        raise BadInput(
            f"{path} is unreadable: a swap was interrupted and its journal damaged; check the stage "
            f"folders, {BUILDING}/ and {PREVIOUS}/ of {run_dir} by hand, then remove {path}"
        ) from None
    if journal:
        check_journal(run_dir, journal)
        log.warning(
            "finishing the interrupted %s of the %s stage in %s", journal.get("action"), journal.get("stage"), run_dir
        )
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


def _replace(run_dir: str, src: str, dst: str) -> list[dict[str, Any]]:
    """Ops moving `src` to `dst`, deleting what `dst` held first."""
    ops = [{"op": "delete", "path": dst}] if exists(join(run_dir, dst)) else []
    return [*ops, {"op": "move", "src": src, "dst": dst}]


def commit(run_dir: str, name: str) -> None:
    """Swap the complete `_building/<name>` in. A complete current output becomes the previous
    generation (replacing the one before it); an incomplete one (no readable manifest) is kept
    aside as `_previous/<name>.incomplete`, leaving the previous generation alone."""
    ops = []
    if read_manifest_at(join(run_dir, name)) is not None:
        ensure_folder(join(run_dir, PREVIOUS))
        ops += _replace(run_dir, name, f"{PREVIOUS}/{name}")
    elif exists(join(run_dir, name)):
        ensure_folder(join(run_dir, PREVIOUS))
        ops += _replace(run_dir, name, f"{PREVIOUS}/{name}.incomplete")
    ops.append({"op": "move", "src": f"{BUILDING}/{name}", "dst": name})
    _swap(run_dir, name, "commit", ops)


def set_aside(run_dir: str, name: str) -> str:
    """Move an unfinished build that a run will not resume (another lineage, or --force) to
    `_previous/<name>.unfinished/` instead of deleting it: its checkpoints may have cost days."""
    ensure_folder(join(run_dir, PREVIOUS))
    aside = f"{PREVIOUS}/{name}.unfinished"
    _swap(run_dir, name, "set-aside", _replace(run_dir, f"{BUILDING}/{name}", aside))
    return join(run_dir, aside)


def restore(config, name: str) -> str:
    """Swap `_previous/<name>` and `<name>`: the previous output becomes current and the current one
    previous, so a second restore undoes the first. Returns the restored folder."""
    run_dir = check_run_dir(config.run_dir)
    if not owned(run_dir, kind="run"):
        raise MissingInput(f"run_dir={config.run_dir}: no run of albert-ray there")
    with hold(run_dir):
        finish_interrupted_swap(run_dir)
        previous = previous_dir(run_dir, name)
        if read_manifest_at(previous) is None:
            raise MissingInput(f"{previous}: no complete previous output of the {name} stage to restore")
        stash = f"{PREVIOUS}/{name}.restoring"
        ops = [{"op": "move", "src": f"{PREVIOUS}/{name}", "dst": stash}]
        if exists(join(run_dir, name)):
            ops.append({"op": "move", "src": name, "dst": f"{PREVIOUS}/{name}"})
        ops.append({"op": "move", "src": stash, "dst": name})
        _swap(run_dir, name, "restore", ops)
    return join(run_dir, name)


__all__ = [
    "SWAP",
    "building_dir",
    "check_journal",
    "commit",
    "finish_interrupted_swap",
    "previous_dir",
    "restore",
    "set_aside",
]
