"""Lines of Ray's that say nothing true or needed to the console, dropped from this process's stderr.

Ray's core worker (C++) writes its error-level lines straight to file descriptor 2, where no Python
logging filter sees them, and the lines of Ray's workers that the driver prints (prefixed
"(ServeController pid=...)") arrive as text on descriptor 2 too. Dropped (DROPPED_LINES, each with why):

- core_worker.cc's "Actor with class name: 'MapWorker(...)' (or Ray Train's 'PreemptionWatcher') ...
  has constructor arguments in the object store and max_restarts > 0", in every run that starts a
  Ray Data actor pool or a Ray Train run. Ray Data and Ray Train pass their actors object references
  they own themselves (the UDF, the DataContext), which live as long as the driver that would
  restart the actor, so the warning does not apply to them; upstream tracks it as
  ray-project/ray#57733 (the underlying limit: #53727). Turning the actors' restarts off to silence
  it would lose Ray Data's fault tolerance.
- Ray Serve's INFO lines from its own actors (controller, proxy, HAProxy's manager) and the
  replicas' INFO lines in Serve's format (each request's access line, the port each replica took):
  about forty at an endpoint's start and stop and one a request, where `albert-ray serve` prints
  what matters itself. They stay in the Ray session's logs/serve/ files; Serve's warnings and errors,
  and the replicas' own lines in any other format, still come through.
- Serve's controller warning "HTTPOptions.host=... won't accept connections from HAProxy on other
  nodes", which Ray logs for every --host but 0.0.0.0 whatever the cluster: `albert-ray serve` puts
  HAProxy in front only where no replica can be on another node (serve_ingress.host_across_nodes),
  so for it the warning never holds.

The raylet's "Task ServeController.graceful_shutdown failed ... killed by `ray.kill`" at each stop of
an endpoint (serve.shutdown kills the controller once it has shut down, while the call that asked it
to is still retried; the kind of noise ray-project/ray#35391 reported) is not among them: the driver
prints it on standard output, which no relay takes.

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

SERVE_ACTOR = r"\((?:ServeController|ProxyActor|HAProxyManager|ServeReplica:[^ )]*) pid=\d+(?:, ip=[^)]*)?\)\S*"
"""The driver's prefix of a Serve actor's line ("(ServeController pid=1)", colour codes after it on a terminal)."""
DROPPED_LINES = (
    # ray-project/ray#57733: the false warning on Ray Data's and Ray Train's own actors
    r"core_worker\.cc:\d+: Actor with class name: .* has constructor arguments in the object store and "
    r"max_restarts > 0",
    # Serve's INFO lines, in its format ("INFO 2026-11-27 18:56:06,476 controller 18497 -- ..."): in logs/serve/
    SERVE_ACTOR + r" INFO \d{4}-\d\d-\d\d \d",
    # Serve's host warning, which never holds where albert-ray serve puts HAProxy in front
    SERVE_ACTOR + r" WARNING .* -- HTTPOptions\.host=.* won't accept connections from HAProxy on other nodes",
)
DROPPED = "|".join(f"(?:{line})" for line in DROPPED_LINES)
"""One pattern of them all: the relay's."""

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


__all__ = ["DROPPED", "DROPPED_LINES", "SERVE_ACTOR", "drop_native_lines"]
