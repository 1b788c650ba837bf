"""Local and s3:// paths through one fsspec interface: files, whole folders, and conditional writes.

Every stage reads and writes through these functions, so a run_dir may be a local folder or
s3://bucket/prefix. Deleting is not here: only the run lifecycle (pipelines/rundir/lifecycle.py) deletes,
and only folders that carry its marker.
"""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import shutil
import uuid
from collections.abc import Sequence
from typing import Any

import fsspec

PKG_SCHEME = "pkg://"


def resolve_pkg(path: str) -> str:
    """`pkg://<package>/<sub/path>`: a folder inside an installed package (the embedded corpus)."""
    if not path.startswith(PKG_SCHEME):
        return path
    package, _, sub = path[len(PKG_SCHEME) :].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        from ..errors import MissingInput

        raise MissingInput(f"{path}: package {package!r} is not installed (pip install {package})")
    return os.path.join(spec.submodule_search_locations[0], sub)


def is_remote(path: str) -> bool:
    return "://" in resolve_pkg(path)


def _s3_endpoint() -> str | None:
    return os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it). s3:// honours AWS_ENDPOINT_URL (a local S3 API server)."""
    path = resolve_pkg(path)
    if path.startswith("s3://"):
        import s3fs

        endpoint = _s3_endpoint()
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint} if endpoint else {})
        return fs, path[len("s3://") :]
    return fsspec.filesystem("file"), os.path.abspath(os.path.expanduser(path))


def arrow_filesystem(path: str):
    """(pyarrow filesystem, path inside it) for Ray Data and Ray Train storage; s3:// honours
    AWS_ENDPOINT_URL, which pyarrow's S3FileSystem ignores by itself."""
    import pyarrow.fs as pafs

    path = resolve_pkg(path)
    if path.startswith("s3://"):
        endpoint = _s3_endpoint()
        kwargs = {}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            kwargs = {"endpoint_override": host or scheme, "scheme": scheme if host else "https"}
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return pafs.S3FileSystem(**kwargs, **({"region": region} if region else {})), path[len("s3://") :]
    return pafs.LocalFileSystem(), os.path.abspath(os.path.expanduser(path))


def canonical(path: str) -> str:
    """An absolute local path with links resolved, or s3://bucket/prefix without a trailing slash."""
    path = resolve_pkg(path)
    if is_remote(path):
        scheme, _, rest = path.partition("://")
        return f"{scheme}://{rest.strip('/')}"
    return os.path.realpath(os.path.expanduser(path))


def key_relpath(key: str, root: str) -> str:
    """posixpath.relpath for object-store keys and URLs. posixpath's would make both absolute with
    the process's working directory, which a Ray worker may no longer have (FileNotFoundError from
    os.getcwd), and which has nothing to do with a bucket."""
    key, root = posixpath.normpath(key), posixpath.normpath(root)
    common = posixpath.commonpath([key, root]) if key.startswith("/") == root.startswith("/") else ""
    ups = [".."] * len([p for p in root[len(common) :].split("/") if p])
    down = [p for p in key[len(common) :].split("/") if p]
    return "/".join(ups + down) or "."


def path_inside(root: str, path: str) -> str | None:
    """`path` relative to `root` ("." for root itself), or None when it lies outside."""
    root, path = canonical(root), canonical(path)
    if is_remote(root) != is_remote(path):
        return None
    rel = key_relpath(path, root) if is_remote(root) else os.path.relpath(path, root)
    return None if rel == ".." or rel.startswith("../") else rel.replace(os.sep, "/")


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/"), *parts) if "://" in base else os.path.join(base, *parts)


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    if is_remote(path):
        fs.invalidate_cache(p)  # other processes (Ray workers, another run) write here too
    return fs.exists(p)


def write_text(path: str, text: str) -> None:
    """Write so that a reader never sees half a file: one PUT on S3, a synced temporary file
    renamed into place locally."""
    if is_remote(path):
        write_bytes(path, text.encode())
        return
    _, p = filesystem(path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    replace_file(p, text.encode())


def write_json(path: str, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_bytes(path: str, data: bytes) -> None:
    fs, p = filesystem(path)
    if not is_remote(path):  # on S3 a folder needs no creating (and s3fs would create a missing bucket)
        os.makedirs(os.path.dirname(p), exist_ok=True)
    with fs.open(p, "wb") as f:
        f.write(data)


def read_bytes(path: str) -> bytes:
    fs, p = filesystem(path)
    with fs.open(p, "rb") as f:
        return f.read()


def read_json(path: str) -> Any:
    """A JSON file's content, or None when there is no such file."""
    return json.loads(read_bytes(path)) if exists(path) else None


def read_jsonl(path: str) -> list[dict]:
    """A JSON-lines file's records (blank lines skipped); [] when there is no such file."""
    if not exists(path):
        return []
    return [json.loads(line) for line in read_bytes(path).decode().splitlines() if line.strip()]


def parquet_files(folder: str) -> tuple[Any, list[str]]:
    """(pyarrow filesystem, the `*.parquet` files below `folder` in name order); [] when it does
    not exist."""
    import pyarrow.fs as pafs

    fs, root = arrow_filesystem(folder)
    infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    return fs, sorted(i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet"))


def list_names(path: str) -> list[str]:
    """The names directly inside a folder (files and sub-folders), sorted; [] when it does not exist."""
    fs, p = filesystem(path)
    if is_remote(path):
        fs.invalidate_cache(p)
    if not fs.exists(p) or not fs.isdir(p):
        return []
    return sorted({posixpath.basename(entry.rstrip("/")) for entry in fs.ls(p, detail=False)} - {""})


def _files(path: str) -> list[str]:
    """Every file under a folder (locally) or every object under a prefix, as `bucket/key`: S3 keys
    are listed raw, so the empty `dir/` objects that pyarrow (Ray Train, Ray Tune) leaves as
    directory markers are included, and moved or deleted with the rest."""
    fs, p = filesystem(path)
    if not is_remote(path):
        return sorted(fs.find(p)) if fs.exists(p) else []
    from fsspec.asyn import sync

    bucket, _, prefix = p.partition("/")

    async def keys() -> list[str]:
        found, token = [], None
        while True:
            page = await fs._call_s3(
                "list_objects_v2",
                Bucket=bucket,
                Prefix=prefix.rstrip("/") + "/",
                **({"ContinuationToken": token} if token else {}),
            )
            found += [f"{bucket}/{o['Key']}" for o in page.get("Contents", [])]
            token = page.get("NextContinuationToken")
            if not token:
                return sorted(found)

    return sync(fs.loop, keys)


def _delete_objects(path: str, objects: list[str]) -> None:
    """Delete S3 objects given as `bucket/key` (directory markers `bucket/dir/` included)."""
    from fsspec.asyn import sync

    fs, _ = filesystem(path)
    for start in range(0, len(objects), 1000):
        batch = objects[start : start + 1000]
        bucket = batch[0].partition("/")[0]
        sync(
            fs.loop,
            fs._call_s3,
            "delete_objects",
            Bucket=bucket,
            Delete={"Objects": [{"Key": o.partition("/")[2]} for o in batch], "Quiet": True},
        )
    fs.invalidate_cache()


def _ordered(files: list[str], root: str, first: Sequence[str], last: Sequence[str]) -> list[str]:
    """`files` (under `root`) with those named `first` (relative paths) at the front and `last` at the end."""
    rel = {f: key_relpath(f, root) for f in files}
    head = [f for f in files if rel[f] in first]
    tail = [f for f in files if rel[f] in last]
    return head + [f for f in files if rel[f] not in first and rel[f] not in last] + tail


def move_tree(src: str, dst: str, complete_last: Sequence[str] = (), owner_first: Sequence[str] = ()) -> None:
    """Move a folder to `dst`, which must not exist yet. Locally one rename (atomic). On an object
    store object by object, so that neither side ever looks complete or unowned in between: the
    files named `complete_last` (a manifest) leave the source first and arrive at `dst` last, those
    named `owner_first` (a marker) arrive at `dst` first and leave the source last. An interrupted
    move is finished by calling it again."""
    fs, s = filesystem(src)
    _, d = filesystem(dst)
    if not is_remote(src):
        if not os.path.lexists(s):
            return
        os.makedirs(os.path.dirname(d), exist_ok=True)
        os.rename(s, d)
        return
    fs.invalidate_cache()
    for name in complete_last:  # parked at the destination under another name until the end
        if fs.exists(f"{s}/{name}"):
            fs.copy(f"{s}/{name}", f"{d}/{name}.moving")
            _delete_objects(src, [f"{s}/{name}"])
    for name in owner_first:
        if fs.exists(f"{s}/{name}"):
            fs.copy(f"{s}/{name}", f"{d}/{name}")
    objects = _files(src)
    held = {f"{s}/{name}" for name in owner_first}
    for f in (o for o in objects if not o.endswith("/") and o not in held):
        fs.copy(f, posixpath.join(d, key_relpath(f, s)))
        _delete_objects(src, [f])
    rest = list(_files(src))  # the owner files and the empty `dir/` markers pyarrow leaves
    if rest:
        _delete_objects(src, rest)
    for name in complete_last:
        if fs.exists(f"{d}/{name}.moving"):
            fs.copy(f"{d}/{name}.moving", f"{d}/{name}")
            _delete_objects(dst, [f"{d}/{name}.moving"])
    fs.invalidate_cache()


def copy_tree(src: str, dst: str, last: Sequence[str] = ()) -> None:
    """Copy a folder's files to `dst` (local or s3://, the same kind as `src`), the files named
    `last` (relative paths, a completion marker) after everything else."""
    fs, s = filesystem(src)
    _, d = filesystem(dst)
    files = [f for f in _ordered(_files(src), s, (), last) if not f.endswith("/")]
    for f in files:
        target = posixpath.join(d, key_relpath(f, s))
        if not is_remote(src):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(f, target)
        else:
            fs.copy(f, target)
    if is_remote(src):
        fs.invalidate_cache()


def copy_file(src: str, dst: str, chunk: int = 16 * 2**20) -> None:
    """One file between any two places, local or s3:// (copy_tree keeps to one kind), streamed in chunks."""
    sfs, s = filesystem(src)
    dfs, d = filesystem(dst)
    if not is_remote(dst):
        os.makedirs(os.path.dirname(d), exist_ok=True)
    with sfs.open(s, "rb") as r, dfs.open(d, "wb") as w:
        shutil.copyfileobj(r, w, chunk)


def delete_tree(path: str, last: Sequence[str] = ()) -> None:
    """Delete a folder, the entries named `last` (relative paths) after everything else, so an
    interrupted delete leaves them in place."""
    fs, p = filesystem(path)
    if not is_remote(path):
        if os.path.islink(p):  # a link is removed, never what it points to
            os.unlink(p)
            return
        if not os.path.isdir(p):
            return
        for name in sorted(os.listdir(p)):
            if name not in last:
                target = os.path.join(p, name)
                shutil.rmtree(target) if os.path.isdir(target) and not os.path.islink(target) else os.unlink(target)
        shutil.rmtree(p)
        return
    files = _ordered(_files(path), p, (), last)
    tail = [f for f in files if key_relpath(f, p) in last]
    for group in ([f for f in files if f not in tail], tail):
        if group:
            _delete_objects(path, group)


def replace_file(path: str, data: bytes) -> None:
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


__all__ = [
    "PKG_SCHEME",
    "arrow_filesystem",
    "canonical",
    "copy_file",
    "copy_tree",
    "delete_tree",
    "exists",
    "key_relpath",
    "filesystem",
    "is_remote",
    "join",
    "list_names",
    "move_tree",
    "path_inside",
    "read_bytes",
    "read_json",
    "read_jsonl",
    "resolve_pkg",
    "write_bytes",
    "write_json",
    "write_text",
]
