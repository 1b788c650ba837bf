"""Who listens on a port: the serve tests' checks of the endpoint's ingress and of its port freed."""

import socket
import time

import psutil


def listeners(port: int) -> set[str]:
    """The names of the processes listening on `port` (HAProxy in front, or Serve's proxy actor); a
    process that exits meanwhile (HAProxy hands its socket to a new process when it reloads its
    configuration, as replicas come up) is left out."""
    names = set()
    for c in psutil.net_connections("tcp"):
        if c.status == "LISTEN" and c.laddr.port == port and c.pid is not None:
            try:
                names.add(psutil.Process(c.pid).name())
            except psutil.NoSuchProcess:
                continue
    return names


def refuses_connections(port: int, wait_s: float = 10.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return True
        time.sleep(0.2)
    return False
