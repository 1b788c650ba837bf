"""This checkout's local Ray head as the other processes find it: its state (pid, ports, token) in
`.ray-local/` of the checkout (or $ALBERT_RAY_LOCAL_DIR), written by `albert-ray local start`
(pipelines/cli/local_cluster.py, which starts and stops it) and read by every command that joins it
(ray_runtime.init_ray)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import stat
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError

REPO = Path(__file__).resolve().parents[2]
LOCAL_DIR_ENV = "ALBERT_RAY_LOCAL_DIR"


def local_dir() -> Path:
    """Where the local head's state lives: $ALBERT_RAY_LOCAL_DIR (one head for several checkouts, or
    the state kept elsewhere), else `.ray-local/` in this checkout."""
    return Path(os.environ.get(LOCAL_DIR_ENV) or REPO / ".ray-local")


@dataclass
class LocalHead:
    pid: int
    """The `ray start --head --block` process; its process group holds the head's processes."""
    ports: dict[str, int]
    temp_dir: str
    token: str

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['dashboard-port']}"

    def client_env(self) -> dict[str, str]:
        """The environment for `ray job submit` (and other clients) against this head."""
        return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "RAY_ADDRESS": self.dashboard_url}

    def responds(self) -> bool:
        request = urllib.request.Request(
            self.dashboard_url + "/api/version", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return self.responds()

    def agent_listening(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.ports["dashboard-agent-listen-port"])) == 0

    def stop(self, timeout_s: float = 60) -> None:
        """SIGTERM to `ray start --block` (it stops the processes it started), then SIGKILL to its
        process group if anything is left."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.time() + timeout_s
        while time.time() < deadline and group_alive(self.pid):
            time.sleep(0.5)
        if group_alive(self.pid):
            os.killpg(self.pid, signal.SIGKILL)
            while group_alive(self.pid) and time.time() < deadline + 10:
                time.sleep(0.2)


def group_alive(pgid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # reap the leader if this process started it: a zombie
        os.waitpid(pgid, os.WNOHANG)  # still counts as a group member
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def state_file(state_dir: Path) -> Path:
    return state_dir / "head.json"


def write_private(path: Path, text: str) -> None:
    """Write a secret (the head's token) readable by its owner alone from the first byte: the file
    is created 0600, and an existing one is made 0600 before anything is written to it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(text)


def load_head(state_dir: Path | None = None) -> LocalHead | None:
    """The head a state dir (this checkout's by default) started, if it is still up."""
    state_dir = state_dir or local_dir()
    try:
        head = LocalHead(**json.loads(state_file(state_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return head if head.alive() else None


def head_temp_dir(state_dir: Path) -> str:
    """The Ray temp dir of the head a state dir starts: short (Ray's socket paths under it must stay
    below 108 characters) and its own, inside a folder only this user may enter (private_temp_dir):
    Ray opens every folder it makes to every user (mode 0777), so the closed one must be above it."""
    return f"/tmp/ray-albert-{hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:10]}/r"


def private_temp_dir(temp_dir: str) -> None:
    """Make the folder above a head's Ray temp dir (a name any user of the machine can work out,
    under the shared /tmp) one only this user may enter, or refuse by name one where someone else
    could have put things: the folder, or the temp dir inside it, not a folder of this user's (another
    user made it first, or it is a link). Ray keeps the head's sockets, logs and session files there,
    in folders it opens to every user (0777); in a folder another user controls, they could read or
    swap them. A folder of this user's that an earlier version left open (Ray's 0777: it was the temp
    dir itself) is closed to 0700. For a command's own Ray too (ray_runtime.own_temp_dir)."""
    parent = os.path.dirname(temp_dir)
    with contextlib.suppress(FileExistsError):
        os.mkdir(parent, 0o700)
    for path in (parent, temp_dir):
        try:
            info = os.lstat(path)
        except FileNotFoundError:  # the temp dir: Ray makes it
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a link" if stat.S_ISLNK(info.st_mode) else "a file"
            raise UserError(
                f"{path}: this Ray's temp folder is {kind} of user id {info.st_uid}, not a folder of this "
                f"user's (id {os.getuid()}): another user could read or replace the head's files there. Remove it "
                "(or have its owner remove it) and start again"
            )
    os.chmod(parent, 0o700)


__all__ = [
    "LOCAL_DIR_ENV",
    "REPO",
    "LocalHead",
    "local_dir",
    "group_alive",
    "head_temp_dir",
    "load_head",
    "state_file",
    "write_private",
]
