"""Who listens on a port: the serve tests' checks of the endpoint's ingress and of its port freed."""

import socket
import time

import psutil


def listeners(port: int, wait_s: float = 10.0) -> set[str]:
    """The names of the processes listening on `port` (HAProxy in front, or Serve's proxy actor); a
    process that exits meanwhile is left out. HAProxy hands its listening socket to a new process
    each time it reloads its configuration (as replicas come and go, once more right after the
    endpoint is ready), and for that instant no process holds it: looked at again until one does,
    for up to `wait_s` (seen empty once on a slow machine)."""
    deadline = time.monotonic() + wait_s
    while True:
        names = set()
        for c in psutil.net_connections("tcp"):
            if c.status == "LISTEN" and c.laddr.port == port and c.pid is not None:
                try:
                    names.add(psutil.Process(c.pid).name())
                except psutil.NoSuchProcess:
                    continue
        if names or time.monotonic() > deadline:
            return names
        time.sleep(0.2)


def refuses_connections(port: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.2)
    return False
