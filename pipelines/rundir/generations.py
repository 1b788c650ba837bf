"""A stage's generations: the next output built in `_building/<stage>/`, swapped in when complete,
the replaced one kept in `_previous/<stage>/`; restore swaps those two back.

Every swap is a journal, `{run_dir}/_swap.json`: the list of deletes and moves, and how many are
done, written before the first and after each. A swap interrupted by a crash is finished by the
next run, so an output is never half here and half there for longer than that. Only folders
carrying albert-ray's marker are moved or deleted, checked for every folder before the first
change. A journal read back is a file of the run_dir, which anyone with write access could have
edited: it is replayed only if every path in it has the shape a swap writes (`<stage>`,
`_building/<stage>`, `_previous/<stage>[.suffix]`), and each step acts through
pipelines/storage/contained.py, which walks from the run_dir anew at every step and refuses a link
at any component: a step cannot reach outside the run_dir whatever the steps before it moved.

Every swap is fenced by the run_dir's lease (pipelines/rundir/lease.py `Fence`): its journal is written
unconfirmed (`fenced: false`), confirmed once the fence holds, and each step is preceded by a check,
so a run that was paused and lost its lease moves nothing. A journal left unconfirmed is removed
by the next run (none of it was done).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ..errors import BadInput, LeaseHeld, MissingInput
from ..storage import exists, join
from ..storage.conditional import create_exclusive, delete_if, read_versioned, replace_if
from ..storage.contained import Contained, Escape
from .lease import Fence, hold
from .ownership import (
    BUILDING,
    MARKER,
    PREVIOUS,
    check_run_dir,
    ensure_folder,
    owned,
    read_marker,
    refuse_unowned,
    write_marker,
)
from .registry import MANIFEST, read_manifest_at

log = logging.getLogger(__name__)

SWAP = "_swap.json"


def building_dir(run_dir: str, name: str) -> str:
    return join(run_dir, BUILDING, name)


def previous_dir(run_dir: str, name: str) -> str:
    return join(run_dir, PREVIOUS, name)


def _encode(journal: dict[str, Any]) -> bytes:
    return (json.dumps(journal, indent=2, sort_keys=True) + "\n").encode()


def _record(path: str, journal: dict[str, Any], token: str) -> str:
    """Write the journal's progress, only over the version this run wrote last."""
    token = replace_if(path, _encode(journal), token)
    if token is None:
        raise LeaseHeld(
            f"{path} was changed by another run (one that took the run_dir's lease over and finished this "
            f"{journal.get('action')}); this run stops here"
        )
    return token


def journal_paths(run_dir: str) -> Contained:
    """The run_dir as the root of every path a swap journal names."""
    return Contained(run_dir, join(run_dir, SWAP))


def _run_journal(run_dir: str, journal: dict[str, Any], token: str, fence: Fence) -> None:
    """Carry out a journal's remaining operations, each after checking the fence and recorded after
    it, then remove the journal."""
    path, inside = join(run_dir, SWAP), journal_paths(run_dir)
    for i in range(journal["done"], len(journal["ops"])):
        fence.check()
        op = journal["ops"][i]
        if op["op"] == "delete":
            inside.delete(op["path"], last=[MARKER])
        else:
            # a folder is complete when its manifest arrives (last) and stops being complete when it
            # leaves (first); both sides keep their marker throughout
            inside.move(op["src"], op["dst"], complete_last=[MANIFEST], owner_first=[MARKER])
        journal["done"] = i + 1
        token = _record(path, journal, token)
    delete_if(path, token)


def _refuse_journal(path: str, why: str) -> BadInput:
    return BadInput(f"{path}: {why}; nothing was moved or deleted: check it, then remove {path} by hand")


def check_journal(run_dir: str, journal: Any) -> None:
    """A journal read from the run_dir is one a swap could have written, every path a stage folder
    of the run_dir reached through no link as things stand (each step checks again as it acts)."""
    path, inside = join(run_dir, SWAP), journal_paths(run_dir)
    ops = journal.get("ops") if isinstance(journal, dict) else None
    done = journal.get("done") if isinstance(journal, dict) else None
    if not isinstance(ops, list) or not isinstance(done, int) or isinstance(done, bool) or not 0 <= done <= len(ops):
        raise _refuse_journal(path, "not a swap journal (ops, done)")
    if not isinstance(journal.get("fenced", True), bool):
        raise _refuse_journal(path, f"fenced={journal['fenced']!r} is not true or false")
    for op in ops:
        keys = {"delete": ("path",), "move": ("src", "dst")}.get(op.get("op")) if isinstance(op, dict) else None
        if keys is None or set(op) != {"op", *keys}:
            raise _refuse_journal(path, f"operation {op!r} is not a delete or a move")
        for key in keys:
            try:
                parts = inside.parts(op[key])
                stage = len(parts) == 1 and parts[0][0] not in "._"  # not _building, _previous or a control file
                if not (stage or (len(parts) == 2 and parts[0] in (BUILDING, PREVIOUS))) or ":" in op[key]:
                    raise inside.refuse(op[key], f"is not a stage folder inside {run_dir}")
                inside.path(op[key])
            except Escape as e:
                raise _refuse_journal(path, f"{key}={op[key]!r} {e.why}") from None


def read_journal(run_dir: str) -> tuple[dict[str, Any], str] | None:
    """The journal of an interrupted swap and its version token, checked; None when there is none."""
    path = join(run_dir, SWAP)
    found = read_versioned(path)
    if found is None:
        return None
    try:
        journal = json.loads(found[0])
    except ValueError:
        raise BadInput(
            f"{path} is unreadable: a swap was interrupted and its journal damaged; check the stage "
            f"folders, {BUILDING}/ and {PREVIOUS}/ of {run_dir} by hand, then remove {path}"
        ) from None
    check_journal(run_dir, journal)
    return journal, found[1]


def finish_interrupted_swap(run_dir: str, fence: Fence) -> None:
    """A swap interrupted by a crash (its journal is still there) is finished before anything else.
    A journal its run never confirmed under the lease (`fenced: false`: nothing of it was done) is
    removed instead."""
    if read_journal(run_dir) is None:
        return
    with fence.held():
        found = read_journal(run_dir)  # again under the fence: the run that wrote it may have finished it
        if found is None:
            return
        journal, token = found
        stage, action = journal.get("stage"), journal.get("action")
        if journal.get("fenced", True) is False:
            fence.check()
            delete_if(join(run_dir, SWAP), token)
            print(
                f"{stage}: removed the unconfirmed {action} journal of a run that lost its lease (none of it was done)"
            )
            return
        log.warning("finishing the interrupted %s of the %s stage in %s", action, stage, run_dir)
        print(f"{stage}: finishing an interrupted {action} in {run_dir}", flush=True)
        _run_journal(run_dir, journal, token, fence)


def pending_moves(run_dir: str) -> tuple[dict[str, Any] | None, dict[str, str | None]]:
    """The interrupted swap's journal, and where the next run will have moved each folder it names
    once it has finished it (`{"pretrain": "_building/pretrain"}`: what `_building/pretrain` holds
    now will be the current output; None: nothing will be there). An unconfirmed journal moves
    nothing. Read-only, for --dry-run."""
    found = read_journal(run_dir)
    if found is None or found[0].get("fenced", True) is False:
        return (found[0] if found else None), {}
    journal, moved = found[0], {}
    for op in journal["ops"][journal["done"] :]:
        if op["op"] == "delete":
            moved[op["path"]] = None
            continue
        now = moved.get(op["src"], op["src"])
        if now is not None and (now != op["src"] or exists(join(run_dir, now))):
            moved[op["dst"]], moved[op["src"]] = now, None
    return journal, moved


def _swap(run_dir: str, name: str, action: str, ops: list[dict[str, Any]], fence: Fence) -> None:
    """Journal and carry out `ops` under the fence: the journal is written unconfirmed, confirmed once
    the fence holds (the commit point), and only then is anything moved."""
    path, inside = join(run_dir, SWAP), journal_paths(run_dir)
    with fence.held():
        fence.check()
        for op in ops:  # every folder touched must be ours, and reached through no link, before the first change
            for key in ("path", "src", "dst"):
                if key in op:
                    inside.path(op[key])
                    if key != "dst":
                        refuse_unowned(join(run_dir, op[key]), name)
        journal = {"stage": name, "action": action, "ops": ops, "done": 0, "owner": fence.owner, "fenced": False}
        token = create_exclusive(path, _encode(journal))
        if token is None:
            raise LeaseHeld(f"{path}: another run's swap is in progress; this {action} of {name} was not started")
        try:
            fence.check()
        except LeaseHeld:
            delete_if(path, token)
            raise
        journal["fenced"] = True
        _run_journal(run_dir, journal, _record(path, journal, token), fence)


def _replace(run_dir: str, src: str, dst: str) -> list[dict[str, Any]]:
    """Ops moving `src` to `dst`, deleting what `dst` held first."""
    ops = [{"op": "delete", "path": dst}] if exists(join(run_dir, dst)) else []
    return [*ops, {"op": "move", "src": src, "dst": dst}]


def commit(run_dir: str, name: str, fence: Fence) -> None:
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
    _swap(run_dir, name, "commit", ops, fence)


def set_aside(run_dir: str, name: str, fence: Fence) -> str:
    """Move an unfinished build that a run will not resume (another lineage, or --force) to
    `_previous/<name>.unfinished/` instead of deleting it: its checkpoints may have cost days."""
    ensure_folder(join(run_dir, PREVIOUS))
    aside = f"{PREVIOUS}/{name}.unfinished"
    _swap(run_dir, name, "set-aside", _replace(run_dir, f"{BUILDING}/{name}", aside), fence)
    return join(run_dir, aside)


def keep_orphaned(run_dir: str, name: str, fence: Fence) -> str | None:
    """`_building/<name>` without a marker, left by a run that lost the run_dir's lease while building
    (its build was discarded by the run that took the lease over, and its later writes made the folder
    anew): moved to `_previous/<name>.orphaned[-N]` and marked as such, never deleted. Returns where it
    went, or None when there was no such folder. A link there stays refused (ownership.refuse_unowned)."""
    folder = building_dir(run_dir, name)
    rel = f"{BUILDING}/{name}"
    try:
        if not own_folders(run_dir).exists(rel) or read_marker(folder) is not None:
            return None
    except Escape:  # a link: refused by the ownership check that follows
        return None
    ensure_folder(join(run_dir, PREVIOUS))
    aside = next(
        f"{PREVIOUS}/{name}.orphaned{suffix}"
        for suffix in ("", *(f"-{n}" for n in range(2, 10**6)))
        if not exists(join(run_dir, f"{PREVIOUS}/{name}.orphaned{suffix}"))
    )
    with fence.held():
        fence.check()
        write_marker(folder, "stage", stage=name, orphaned=True)
    _swap(run_dir, name, "set-aside", [{"op": "move", "src": rel, "dst": aside}], fence)
    return join(run_dir, aside)


def own_folders(run_dir: str) -> Contained:
    """The run_dir as the root of the lifecycle's own changes: a link planted in `_building/` or
    `_previous/` is refused, never followed."""
    return Contained(run_dir, f"run_dir={run_dir}")


def restore(config, name: str) -> str:
    """Swap `_previous/<name>` and `<name>`: the previous output becomes current and the current one
    previous, so a second restore undoes the first. Returns the restored folder."""
    run_dir = check_run_dir(config.run_dir)
    if not owned(run_dir, kind="run"):
        raise MissingInput(f"run_dir={config.run_dir}: no run of albert-ray there")
    with hold(run_dir) as lease:
        fence = Fence(run_dir, lease)
        finish_interrupted_swap(run_dir, fence)
        previous = own_folders(run_dir).path(f"{PREVIOUS}/{name}")  # refused where _previous is a link
        if read_manifest_at(previous) is None:
            raise MissingInput(f"{previous}: no complete previous output of the {name} stage to restore")
        stash = f"{PREVIOUS}/{name}.restoring"
        ops = [{"op": "move", "src": f"{PREVIOUS}/{name}", "dst": stash}]
        if exists(join(run_dir, name)):
            ops.append({"op": "move", "src": name, "dst": f"{PREVIOUS}/{name}"})
        ops.append({"op": "move", "src": stash, "dst": name})
        _swap(run_dir, name, "restore", ops, fence)
    return join(run_dir, name)


__all__ = [
    "SWAP",
    "building_dir",
    "check_journal",
    "commit",
    "finish_interrupted_swap",
    "keep_orphaned",
    "own_folders",
    "pending_moves",
    "previous_dir",
    "read_journal",
    "restore",
    "set_aside",
]
