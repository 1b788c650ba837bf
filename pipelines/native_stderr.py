"""Known-false error lines of Ray's C++ core worker, dropped from this process's stderr.

Ray's core worker (C++) writes its error-level lines straight to file descriptor 2, where no Python
logging filter sees them. One of them is in every run that starts a Ray Data actor pool or a Ray
Train run: "core_worker.cc: Actor with class name: 'MapWorker(...)' (or Ray Train's
'PreemptionWatcher') ... has constructor arguments in the object store and max_restarts > 0". Ray
Data and Ray Train pass their actors object references they own themselves (the UDF, the
DataContext), which live as long as the driver that would restart the actor, so the warning does not
apply to them; upstream tracks it as ray-project/ray#57733 (the underlying limit: #53727). Turning
the actors' restarts off to silence it would lose Ray Data's fault tolerance.

`drop_native_lines` puts a relay between descriptor 2 and where it pointed: a small process that
copies every line through except those. A separate process rather than a thread, so that the last
lines of a crash (a native abort, SIGKILL of this process) still come out: the relay reads until the
pipe closes, which it does only when this process (and any child it started holding descriptor 2) has
ended. It runs in a session of its own, so Ctrl-C, a terminal's hang-up or a signal to this process's
group reaches only this process, whose last words it still relays. The lines of Ray's workers that
the driver prints (prefixed "(TrainController pid=...)") pass through the same relay.
"""

from __future__ import annotations

import os
import subprocess
import sys

DROPPED = (
    r"core_worker\.cc:\d+: Actor with class name: .* has constructor arguments in the object store and max_restarts > 0"
)
"""ray-project/ray#57733: the false warning on Ray Data's and Ray Train's own actors."""

_RELAY = """
import re, sys
dropped = re.compile(sys.argv[1].encode())
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if not dropped.search(line):
        out.write(line)
        out.flush()
"""

_relay: subprocess.Popen | None = None  # held, so that it is not reaped (or warned about) while it runs


def drop_native_lines() -> None:
    """From now on, this process's descriptor 2 goes through the relay (once per process)."""
    global _relay
    if _relay is not None:
        return
    sys.stderr.flush()
    target = os.dup(2)
    read, write = os.pipe()
    try:
        # -I -S: no user site, no PYTHON* variables, no site import: a bare interpreter in ~20 ms
        _relay = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _RELAY, DROPPED],
            stdin=read,
            stdout=target,
            stderr=target,
            close_fds=True,
            start_new_session=True,
        )
        os.dup2(write, 2)
    finally:
        for fd in (read, write, target):
            os.close(fd)


__all__ = ["DROPPED", "drop_native_lines"]
