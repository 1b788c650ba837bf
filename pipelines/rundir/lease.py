"""One writer per run_dir: a lease with an owner and a heartbeat, in `{run_dir}/_lease.json`.

A run (a stage command, or the full-run DAG's driver) takes the lease before it changes anything
in its run_dir and renews it every TTL/6 seconds from a background thread; a second run on the
same run_dir stops at once with a message naming the holder. A lease whose holder stopped
renewing it for TTL seconds (or whose process is gone, on this host) is taken over with a warning.
The writes are conditional (create-if-absent, compare-and-swap; pipelines/storage/__init__.py), so two
runs that start together cannot both win. The DAG's stage tasks run under their driver's lease:
they check that it still names their run before they commit an output.

A commit is fenced (`Fence`): locally it runs under the lease file's lock after reading the lease
there, so a takeover waits until the commit ends; on S3 (no locks) every step of the swap is
preceded by a conditional write of the lease, and the swap's journal is itself written
conditionally, so a run that lost its lease stops before its next step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone

from ..errors import ConfigError, LeaseHeld
from ..storage import filesystem, is_remote, join
from ..storage.conditional import create_exclusive, delete_if, locked, read_versioned, replace_if

log = logging.getLogger(__name__)

LEASE_FILE = "_lease.json"
TTL_ENV = "ALBERT_LEASE_TTL_S"
MAX_TTL_S = 3600.0
"""No lease blocks a run_dir longer than this after its last heartbeat, whatever TTL it claims."""


def lease_ttl_s() -> float:
    raw = os.environ.get(TTL_ENV, "120")
    try:
        ttl = float(raw)
    except ValueError:
        ttl = math.nan
    if not 0 < ttl <= MAX_TTL_S:
        raise ConfigError(f"{TTL_ENV}={raw}: the lease's TTL must be a number of seconds in (0, {MAX_TTL_S:.0f}]")
    return ttl


def _job_id() -> str | None:
    """The Ray job submission id when this process is a job's entrypoint."""
    try:
        metadata = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}")).get("metadata") or {}
    except ValueError:
        return None
    return metadata.get("job_submission_id")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """What a lease says about the run holding it."""

    owner: str
    host: str
    pid: int
    command: str
    job: str | None
    started: float
    heartbeat: float
    ttl_s: float

    @classmethod
    def this_process(cls) -> Holder:
        now = time.time()
        command = " ".join([os.path.basename(sys.executable), *sys.argv])[:300]
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(), command, _job_id(), now, now, lease_ttl_s())

    def describe(self, now: float | None = None) -> str:
        now = time.time() if now is None else now
        started = datetime.fromtimestamp(self.started, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        job = f", Ray job {self.job}" if self.job else ""
        return (
            f"`{self.command}` (pid {self.pid} on {self.host}{job}; started {started}, last heartbeat "
            f"{max(0.0, now - self.heartbeat):.0f} s ago)"
        )

    def why_stale(self, now: float | None = None) -> str | None:
        """Why another run may take this lease over; None while it is held. A TTL above MAX_TTL_S
        counts as MAX_TTL_S, and a heartbeat more than a TTL in the future (no clock is that far
        off) as none, so a crafted or corrupted lease cannot block the run_dir forever."""
        now = time.time() if now is None else now
        ttl = min(self.ttl_s, MAX_TTL_S) if math.isfinite(self.ttl_s) and self.ttl_s > 0 else 0.0
        age = now - self.heartbeat
        if not math.isfinite(age) or age > ttl:
            return f"no heartbeat for {age:.0f} s (TTL {ttl:.0f} s)" if math.isfinite(age) else "no heartbeat"
        if age < -ttl:
            return f"its heartbeat is {-age:.0f} s in the future"
        if self.host == socket.gethostname() and not _pid_alive(self.pid):
            return f"its process (pid {self.pid}) is gone"
        return None

    def stale(self, now: float | None = None) -> bool:
        return self.why_stale(now) is not None

    def encode(self) -> bytes:
        return (json.dumps(asdict(self), indent=2) + "\n").encode()


def read_holder(run_dir: str) -> tuple[Holder, str] | None:
    """The lease's holder and version token; None when nobody holds the run_dir. A lease file that
    cannot be parsed counts as a stale holder, so it is taken over rather than blocking forever."""
    found = read_versioned(join(run_dir, LEASE_FILE))
    if found is None:
        return None
    data, token = found
    try:
        holder = Holder(**json.loads(data))
        numbers = (holder.pid, holder.started, holder.heartbeat, holder.ttl_s)
        if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
            raise TypeError("not a number")
        if not all(isinstance(t, str) for t in (holder.owner, holder.host, holder.command)):
            raise TypeError("not a string")
        return holder, token
    except (ValueError, TypeError):
        return Holder("unreadable", "?", -1, "an unreadable lease file", None, 0.0, 0.0, 0.0), token


class Lease:
    """A held lease, renewed by a background thread until `release`."""

    def __init__(self, run_dir: str, holder: Holder, token: str):
        self.run_dir, self.holder, self._token = run_dir, holder, token
        self.path = join(run_dir, LEASE_FILE)
        self.lost_to: str | None = None
        self.renewed = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True, name="run-dir-lease")
        self._thread.start()

    @classmethod
    def acquire(cls, run_dir: str) -> Lease:
        holder = Holder.this_process()
        path = join(run_dir, LEASE_FILE)
        token = create_exclusive(path, holder.encode())
        if token is not None:
            return cls(run_dir, holder, token)
        found = read_holder(run_dir)
        if found is not None:
            other, other_token = found
            if not other.stale():
                raise LeaseHeld(
                    f"run_dir {run_dir} is in use by {other.describe()}: wait for it to end or stop it "
                    f"(a holder that stops renewing its lease for {other.ttl_s:.0f} s is taken over)"
                )
            log.warning("taking over the lease on %s from %s: it is no longer renewed", run_dir, other.describe())
            token = replace_if(path, holder.encode(), other_token)
        else:  # released between our two reads
            token = create_exclusive(path, holder.encode())
        if token is None:
            now_held = read_holder(run_dir)
            who = now_held[0].describe() if now_held else "another run"
            raise LeaseHeld(f"run_dir {run_dir} was just taken by {who}")
        return cls(run_dir, holder, token)

    def _try_renew(self) -> bool | None:
        """Renew now: True when renewed, False when another run holds the lease, None when the
        storage could not be reached."""
        with self._lock:
            if self.lost_to is not None:
                return False
            holder = replace(self.holder, heartbeat=time.time())
            try:
                token = replace_if(self.path, holder.encode(), self._token)
                if token is None:  # not the version we wrote last: whose is it?
                    found = read_holder(self.run_dir)
                    if found is not None and found[0].owner == self.holder.owner:  # ours (a retried write)
                        token = found[1]
                    else:
                        self.lost_to = found[0].describe() if found else "nobody (the lease file was removed)"
                        log.error("lost the lease on %s to %s", self.run_dir, self.lost_to)
                        return False
            except Exception as e:  # noqa: BLE001 - any storage failure: tried again at the next beat
                log.warning("could not renew the lease on %s: %s", self.run_dir, e)
                return None
            self.holder, self._token, self.renewed = holder, token, time.monotonic()
            return True

    def _renew(self) -> None:
        while not self._stop.wait(self.holder.ttl_s / 6):
            if self._try_renew() is False:
                return

    def confirm(self) -> None:
        """Renew the lease now, and raise unless this run still holds it: called right before a
        commit, so a run that lost its lease (or could not renew it for a TTL) commits nothing."""
        renewed = self._try_renew()
        if renewed is False:
            raise LeaseHeld(
                f"run_dir {self.run_dir}: this run's lease was taken over by {self.lost_to}; nothing was committed"
            )
        if renewed is None and time.monotonic() - self.renewed > self.holder.ttl_s:
            raise LeaseHeld(
                f"run_dir {self.run_dir}: this run could not renew its lease for "
                f"{self.holder.ttl_s:.0f} s, so another run may have taken it; nothing was committed"
            )

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.lost_to is None:
            try:
                delete_if(self.path, self._token)
            except Exception as e:  # noqa: BLE001 - an unreleased lease expires after its TTL
                log.warning("could not release the lease on %s: %s", self.run_dir, e)


_held: dict[str, tuple[Lease, int]] = {}
_held_lock = threading.Lock()


@contextlib.contextmanager
def hold(run_dir: str, owner: str | None = None) -> Iterator[Lease | None]:
    """Hold the run_dir's lease for the block. Nested holds in one process share one lease. With
    `owner` (a DAG stage task) nothing is acquired: the lease must be held by that owner."""
    if owner is not None:
        check_owner(run_dir, owner)
        yield None
        return
    with _held_lock:
        lease, count = _held.get(run_dir, (None, 0))
        if lease is None:
            lease = Lease.acquire(run_dir)
        _held[run_dir] = (lease, count + 1)
    try:
        yield lease
    finally:
        with _held_lock:
            lease, count = _held[run_dir]
            if count == 1:
                del _held[run_dir]
                lease.release()
            else:
                _held[run_dir] = (lease, count - 1)


def check_owner(run_dir: str, owner: str, fresh: bool = True) -> None:
    """Raise unless the run_dir's lease is held by `owner` (a DAG's driver) and, with `fresh`, renewed."""
    found = read_holder(run_dir)
    if found is None or found[0].owner != owner:
        who = found[0].describe() if found else "nobody"
        raise LeaseHeld(f"run_dir {run_dir}: this run no longer holds its lease (held by {who}); nothing was committed")
    if fresh and found[0].stale():
        raise LeaseHeld(
            f"run_dir {run_dir}: this run's lease is no longer renewed by its driver "
            f"({found[0].describe()}); nothing was committed"
        )


class Fence:
    """A commit's proof that this run still holds the run_dir's lease, checked where the commit
    happens rather than before it: a run paused between a check and its commit must not commit.

    `with fence.held():` wraps a whole swap. Locally it takes the lease file's lock, which every
    lease write also takes, so no run can take the lease over until the swap ends, and `check()`
    only reads the lease. On S3 there are no locks: `check()` renews the lease by a conditional
    write, which succeeds only if nobody took it over (a DAG task reads its driver's lease), and the
    swap checks before its first change and before each step; the journal's own conditional writes
    stop a run whose journal another run has finished meanwhile.
    """

    def __init__(self, run_dir: str, lease: Lease | None, owner: str | None = None):
        if lease is None and owner is None:
            raise ValueError("a fence needs the held lease or its owner")
        self.run_dir, self.lease = run_dir, lease
        self.owner = lease.holder.owner if lease is not None else owner
        self.path = join(run_dir, LEASE_FILE)
        self._locked = False

    @contextlib.contextmanager
    def held(self) -> Iterator[Fence]:
        if is_remote(self.run_dir) or self._locked:
            yield self
            return
        if self.lease is not None:
            self.lease.confirm()  # renewed now: its write takes the lock we are about to hold
        with locked(filesystem(self.path)[1]):
            self._locked = True
            try:
                yield self
            finally:
                self._locked = False

    def check(self) -> None:
        """Raise LeaseHeld unless this run holds the lease now (locally: for the whole `held` block)."""
        if self._locked:
            check_owner(self.run_dir, self.owner, fresh=self.lease is None)
        elif self.lease is not None:
            self.lease.confirm()
        else:  # a DAG task: its driver renews the lease; a write here would change the lease's ETag
            check_owner(self.run_dir, self.owner)


__all__ = [
    "LEASE_FILE",
    "MAX_TTL_S",
    "Fence",
    "Holder",
    "Lease",
    "check_owner",
    "hold",
    "lease_ttl_s",
    "read_holder",
]
