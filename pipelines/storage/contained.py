"""Paths named by a file the product reads (a swap journal, a publish marker) acted on only inside
the folder that file governs, whatever the file says and whatever links the folder holds.

`Contained(root, origin)` takes a relative path as that file wrote it and refuses, as RefusedPath
naming `origin`, one that is absolute, climbs (`..`), or is not a plain `a/b` path. Locally every
operation then walks from the root one component at a time with `O_NOFOLLOW`, holding each
folder's descriptor: a symbolic link at any component between the root and the target (the target
included) is refused, and what it acts on is what it walked to, so a path checked is the path used.
Nothing is resolved once for a whole journal: each step walks anew. On s3:// there are no links;
the checks on the path are the containment.

The root itself is named by the user (a run_dir, predict.output): links in it are theirs and are
followed, once, to its canonical place.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import BinaryIO

from ..errors import RefusedPath
from . import canonical, delete_tree, exists, filesystem, is_remote, join, move_tree

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


class Escape(RefusedPath):
    """A path that would leave its folder: `rel` as the file wrote it, and why it was refused."""

    def __init__(self, origin: str, root: str, rel: object, why: str):
        super().__init__(f"{origin}: {rel!r} {why}; refusing to act on it (nothing outside {root} is touched)")
        self.rel, self.why = rel, why


class Contained:
    """Operations on relative paths inside `root`, refused where they would leave it."""

    def __init__(self, root: str, origin: str):
        self.root = canonical(root)
        self.origin = origin
        self.remote = is_remote(self.root)

    def refuse(self, rel: object, why: str) -> Escape:
        return Escape(self.origin, self.root, rel, why)

    def parts(self, rel: object) -> list[str]:
        """The components of a relative path as a file wrote it, or RefusedPath."""
        if not isinstance(rel, str) or not rel:
            raise self.refuse(rel, "is not a path")
        parts = rel.split("/")
        if rel.startswith("/") or any(p in ("", ".", "..") or "\\" in p or "\0" in p for p in parts):
            raise self.refuse(rel, f"is not a plain relative path inside {self.root}")
        return parts

    def path(self, rel: str) -> str:
        """The full path of `rel`, checked (no link on its way, locally). For reading; every change
        goes through the methods below, which check again as they act."""
        parts = self.parts(rel)
        if not self.remote:
            with self._parent(parts) as parent:
                if parent is not None:
                    self._kind(parent, parts[-1], rel)
        return join(self.root, *parts)

    def exists(self, rel: str) -> bool:
        parts = self.parts(rel)
        if self.remote:
            return exists(join(self.root, *parts))
        with self._parent(parts) as parent:
            return parent is not None and self._kind(parent, parts[-1], rel) is not None

    def delete(self, rel: str, last: Sequence[str] = ()) -> None:
        """Delete a folder (or a file), the entries named `last` after everything else, so an
        interrupted delete leaves them in place. A link anywhere on the way, or as the target, is refused."""
        parts = self.parts(rel)
        if self.remote:
            delete_tree(join(self.root, *parts), last=last)
            return
        with self._parent(parts) as parent:
            kind = None if parent is None else self._kind(parent, parts[-1], rel)
            if kind is None:
                return
            if kind == "file":
                os.unlink(parts[-1], dir_fd=parent)
                return
            folder = self._open(parent, parts[-1], rel)
            try:
                names = sorted(os.listdir(folder))
                for name in [n for n in names if n not in last] + [n for n in names if n in last]:
                    _remove(folder, name)
            finally:
                os.close(folder)
            os.rmdir(parts[-1], dir_fd=parent)

    def remove_file(self, rel: str) -> None:
        """Delete one file; absent is fine; a folder or a link in its place is refused."""
        parts = self.parts(rel)
        if self.remote:
            fs, p = filesystem(join(self.root, *parts))
            if fs.exists(p):
                if fs.isdir(p):
                    raise self.refuse(rel, "is a folder, not a file")
                fs.rm_file(p)
            return
        with self._parent(parts) as parent:
            kind = None if parent is None else self._kind(parent, parts[-1], rel)
            if kind == "folder":
                raise self.refuse(rel, "is a folder, not a file")
            if kind == "file":
                os.unlink(parts[-1], dir_fd=parent)

    def move(self, src: str, dst: str, complete_last: Sequence[str] = (), owner_first: Sequence[str] = ()) -> None:
        """Move `src` to `dst` (which must not exist), both inside the root; an absent `src` is a
        move already done (an interrupted journal replayed). See storage.move_tree for the order."""
        src_parts, dst_parts = self.parts(src), self.parts(dst)
        if dst_parts[: len(src_parts)] == src_parts:
            raise self.refuse(dst, f"lies inside {src!r}, which cannot be moved into itself")
        if self.remote:
            if exists(join(self.root, *src_parts)):
                move_tree(join(self.root, *src_parts), join(self.root, *dst_parts), complete_last, owner_first)
            return
        with self._parent(src_parts) as src_parent:
            if src_parent is None or self._kind(src_parent, src_parts[-1], src) is None:
                return
            with self._parent(dst_parts, create=True) as dst_parent:
                if self._kind(dst_parent, dst_parts[-1], dst) is not None:
                    raise self.refuse(dst, f"already exists, so {src!r} cannot be moved there")
                os.rename(src_parts[-1], dst_parts[-1], src_dir_fd=src_parent, dst_dir_fd=dst_parent)

    @contextmanager
    def open_write(self, rel: str) -> Iterator[BinaryIO]:
        """A file opened for writing (created or truncated), its folders created as needed; a link
        in its place or on its way is refused, never written through."""
        parts = self.parts(rel)
        if self.remote:
            fs, p = filesystem(join(self.root, *parts))
            with fs.open(p, "wb") as f:
                yield f
            return
        with self._parent(parts, create=True) as parent:
            if self._kind(parent, parts[-1], rel) == "folder":
                raise self.refuse(rel, "is a folder, not a file")
            fd = os.open(parts[-1], _WRITE_FLAGS, 0o666, dir_fd=parent)
            with os.fdopen(fd, "wb") as f:
                yield f

    def copy_in(self, src: str, rel: str, chunk: int = 16 * 2**20) -> None:
        """Copy the file `src` (anywhere, local or s3://) to `rel`, streamed."""
        fs, path = filesystem(src)
        with fs.open(path, "rb") as r, self.open_write(rel) as w:
            shutil.copyfileobj(r, w, chunk)

    def read_bytes(self, rel: str) -> bytes | None:
        """A file's bytes, or None when it is absent; a link in its place or on its way is refused."""
        parts = self.parts(rel)
        if self.remote:
            fs, p = filesystem(join(self.root, *parts))
            if not fs.exists(p):
                return None
            with fs.open(p, "rb") as f:
                return f.read()
        with self._parent(parts) as parent:
            kind = None if parent is None else self._kind(parent, parts[-1], rel)
            if kind is None:
                return None
            if kind == "folder":
                raise self.refuse(rel, "is a folder, not a file")
            fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            with os.fdopen(fd, "rb") as f:
                return f.read()

    # ---- local walking -------------------------------------------------------------------------

    def _open(self, parent: int, name: str, rel: str) -> int:
        """The descriptor of the folder `name` in `parent`; a link (or a file) there is refused."""
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                raise
        self._kind(parent, name, rel)  # a link is refused here
        raise self.refuse(rel, f"goes through a file ({name}) where a folder should be")

    def _kind(self, parent: int, name: str, rel: str) -> str | None:
        """'file', 'folder' or None (absent) for `name` in the folder `parent`; a link is refused."""
        try:
            mode = os.lstat(name, dir_fd=parent).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            raise self.refuse(rel, f"is or goes through a symbolic link ({name})")
        if stat.S_ISDIR(mode):
            return "folder"
        if stat.S_ISREG(mode):
            return "file"
        raise self.refuse(rel, f"is not a file or a folder ({name})")

    @contextmanager
    def _parent(self, parts: list[str], create: bool = False) -> Iterator[int | None]:
        """The descriptor of the folder holding the last component, walked to without following any
        link; None when a folder on the way is absent (and `create` is off)."""
        if create:
            os.makedirs(self.root, exist_ok=True)
        try:
            fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            yield None
            return
        try:
            rel = "/".join(parts)
            for name in parts[:-1]:
                if create and self._kind(fd, name, rel) is None:
                    os.mkdir(name, dir_fd=fd)
                try:
                    inner = self._open(fd, name, rel)
                except FileNotFoundError:
                    os.close(fd)
                    fd = -1
                    yield None
                    return
                os.close(fd)
                fd = inner
            yield fd
        finally:
            if fd >= 0:
                os.close(fd)


def _remove(folder: int, name: str) -> None:
    """Remove `name` from the folder `folder`, a sub-folder by descriptors all the way down: a link
    is removed itself, never what it points to."""
    if not stat.S_ISDIR(os.lstat(name, dir_fd=folder).st_mode):
        os.unlink(name, dir_fd=folder)
        return
    inner = os.open(name, _DIR_FLAGS, dir_fd=folder)
    try:
        for entry in os.listdir(inner):
            _remove(inner, entry)
    finally:
        os.close(inner)
    os.rmdir(name, dir_fd=folder)


__all__ = ["Contained", "Escape"]
