"""Local and s3:// paths through one fsspec interface, and outputs committed atomically."""
from __future__ import annotations

import importlib.util
import json
import os
import posixpath
from typing import Any

import fsspec

PKG_SCHEME = "pkg://"


def resolve_pkg(path: str) -> str:
    """`pkg://<package>/<sub/path>`: a folder inside an installed package (the embedded corpus)."""
    if not path.startswith(PKG_SCHEME):
        return path
    package, _, sub = path[len(PKG_SCHEME):].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{path}: package {package!r} is not installed (pip install {package})")
    return os.path.join(spec.submodule_search_locations[0], sub)


def filesystem(path: str) -> tuple[fsspec.AbstractFileSystem, str]:
    """(filesystem, path inside it). s3:// honours AWS_ENDPOINT_URL (a local S3 API server)."""
    path = resolve_pkg(path)
    if path.startswith("s3://"):
        import s3fs

        endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": endpoint} if endpoint else {})
        return fs, path[len("s3://"):]
    return fsspec.filesystem("file"), os.path.abspath(path)


def arrow_filesystem(path: str):
    """(pyarrow filesystem, path inside it) for Ray Data and Ray Train storage; s3:// honours
    AWS_ENDPOINT_URL, which pyarrow's S3FileSystem ignores by itself."""
    import pyarrow.fs as pafs

    path = resolve_pkg(path)
    if path.startswith("s3://"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL_S3")
        kwargs = {}
        if endpoint:
            scheme, _, host = endpoint.partition("://")
            kwargs = {"endpoint_override": host or scheme, "scheme": scheme if host else "https"}
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return pafs.S3FileSystem(**kwargs, **({"region": region} if region else {})), path[len("s3://"):]
    return pafs.LocalFileSystem(), os.path.abspath(path)


def join(base: str, *parts: str) -> str:
    return posixpath.join(base.rstrip("/"), *parts) if "://" in base else os.path.join(base, *parts)


def exists(path: str) -> bool:
    fs, p = filesystem(path)
    return fs.exists(p)


def write_text(path: str, text: str) -> None:
    """Write through a temporary name and rename, so a reader never sees half a file."""
    fs, p = filesystem(path)
    fs.makedirs(posixpath.dirname(p), exist_ok=True)
    tmp = p + ".tmp"
    with fs.open(tmp, "w") as f:
        f.write(text)
    fs.mv(tmp, p)


def write_bytes(path: str, data: bytes) -> None:
    fs, p = filesystem(path)
    fs.makedirs(posixpath.dirname(p), exist_ok=True)
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


def remove(path: str) -> None:
    fs, p = filesystem(path)
    if fs.exists(p):
        fs.rm(p, recursive=True)


class StagedOutput:
    """A stage's output folder that becomes visible only when complete.

    Workers write under `<out>/_staging/`; `commit` moves each part into place and writes
    `manifest.json` last. A folder without a manifest is incomplete: `begin` clears it, so a run
    killed mid-write and started again leaves complete, duplicate-free output.
    """

    MANIFEST = "manifest.json"
    STAGING = "_staging"

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.staging = join(out_dir, self.STAGING)

    @property
    def manifest_path(self) -> str:
        return join(self.out_dir, self.MANIFEST)

    def is_complete(self) -> bool:
        return exists(self.manifest_path)

    def begin(self) -> None:
        remove(self.out_dir)
        fs, p = filesystem(self.staging)
        fs.makedirs(p, exist_ok=True)

    def staged(self, *parts: str) -> str:
        return join(self.staging, *parts)

    def commit(self, parts: list[str], manifest: dict[str, Any]) -> None:
        fs, _ = filesystem(self.out_dir)
        for part in parts:
            src, dst = filesystem(self.staged(part))[1], filesystem(join(self.out_dir, part))[1]
            if fs.isfile(src):
                fs.mv(src, dst)
                continue
            # File by file: object stores have no folder rename (s3fs's recursive mv trips on
            # the folder's own key).
            for f in fs.find(src):
                target = posixpath.join(dst, posixpath.relpath(f, src))
                fs.makedirs(posixpath.dirname(target), exist_ok=True)
                fs.mv(f, target)
        remove(self.staging)
        write_text(self.manifest_path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")


__all__ = ["arrow_filesystem", "filesystem", "resolve_pkg", "join", "exists", "write_text", "write_bytes",
           "read_bytes", "read_json", "read_jsonl", "remove", "StagedOutput", "PKG_SCHEME"]
