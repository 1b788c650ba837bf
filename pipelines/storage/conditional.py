"""Conditional writes on local and s3:// paths: create-if-absent and compare-and-swap, the lease's
primitives (pipelines/rundir/lease.py).

Locally under an exclusive flock on `<path>.lock`; on S3 with conditional requests (PutObject with
If-None-Match / If-Match, DeleteObject with If-Match), which AWS S3 has had since 2024. A token
names the version a caller last saw (S3: the ETag; locally: the content's sha256).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any

from ..errors import LeaseHeld
from . import filesystem, is_remote, replace_file

LOCK_WAIT_S = 60.0
"""How long a local conditional write waits for `<path>.lock`. Its holders keep it for one read and
write, or for one commit's renames: a longer wait means a paused or hung process holds it."""


@contextlib.contextmanager
def locked(path: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """An exclusive flock on the local `<path>.lock`, waited for at most `wait_s` seconds."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as lock:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LeaseHeld(
                        f"{path}.lock has been held for over {wait_s:.0f} s by a process that does not release it "
                        "(paused or hung): resume or stop it"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _s3_call(path: str, method: str, **kwargs: Any) -> dict[str, Any] | None:
    """One S3 request on `path`'s object; None when a precondition failed."""
    from fsspec.asyn import sync

    fs, p = filesystem(path)
    bucket, _, key = p.partition("/")

    async def call() -> dict[str, Any]:
        response = await fs._call_s3(method, Bucket=bucket, Key=key, **kwargs)
        if "Body" in response:
            async with response["Body"] as body:
                response["Data"] = await body.read()
        return response

    try:
        return sync(fs.loop, call)
    except (FileNotFoundError, OSError) as e:
        if isinstance(e, FileNotFoundError) and method == "get_object":
            return {}
        code = getattr(e.__cause__, "response", {}).get("Error", {}).get("Code")
        if isinstance(e, FileExistsError) or code in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            return None
        if method != "get_object" and code in ("NoSuchKey", "404"):  # If-Match on a deleted object
            return None
        raise


def read_versioned(path: str) -> tuple[bytes, str] | None:
    """(content, token), or None when there is no such file."""
    if is_remote(path):
        response = _s3_call(path, "get_object")
        return (response["Data"], response["ETag"]) if response else None
    _, p = filesystem(path)
    try:
        with open(p, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    return data, _digest(data)


def create_exclusive(path: str, data: bytes) -> str | None:
    """Write `data` only if `path` does not exist; its token, or None when it existed."""
    if is_remote(path):
        response = _s3_call(path, "put_object", Body=data, IfNoneMatch="*")
        return response["ETag"] if response else None
    _, p = filesystem(path)
    with locked(p):
        if os.path.exists(p):
            return None
        replace_file(p, data)
    return _digest(data)


def replace_if(path: str, data: bytes, token: str) -> str | None:
    """Write `data` only if `path` is still at version `token`; the new token, or None."""
    if is_remote(path):
        response = _s3_call(path, "put_object", Body=data, IfMatch=token)
        return response["ETag"] if response else None
    _, p = filesystem(path)
    with locked(p):
        current = read_versioned(p)
        if current is None or current[1] != token:
            return None
        replace_file(p, data)
    return _digest(data)


def delete_if(path: str, token: str) -> bool:
    """Delete `path` only if it is still at version `token`."""
    if is_remote(path):
        return _s3_call(path, "delete_object", IfMatch=token) is not None
    _, p = filesystem(path)
    with locked(p):
        current = read_versioned(p)
        if current is None or current[1] != token:
            return False
        os.unlink(p)
    return True


__all__ = ["LOCK_WAIT_S", "create_exclusive", "delete_if", "locked", "read_versioned", "replace_if"]
