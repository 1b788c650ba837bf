"""Ray plumbing shared by the stages: connecting, sizing the worker pool, running a UDF over work units."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import socket
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import ray
from ray.data import ActorPoolStrategy

from ..errors import BadInput, UserError, find_user_error
from ..native_stderr import drop_native_lines
from ..prep.corpus import InputFile, pack_units
from ..storage import join
from ..storage.contained import Contained
from .local_head import load_head, private_temp_dir

log = logging.getLogger(__name__)

PRINT_PATCH_ENV = "RAY_TRAIN_ENABLE_PRINT_PATCH"  # Ray Train routes a worker's print through its logger


TOKEN_ENV, TOKEN_PATH_ENV = "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"


class RayStartTimeout(UserError):
    """A Ray this command started did not come up in time (a loaded machine)."""


def init_ray() -> None:
    """Join, in order: the cluster RAY_ADDRESS names (`ray job submit` sets it); this checkout's local
    head when it is up (`albert-ray local start`, or the one `make run` leaves); else start a Ray of
    this command's own. Says which in one line. A Ray of its own gets a token in this process's
    environment, inherited by the cluster it starts, rather than the ~/.ray/auth_token that Ray would
    write readable by every user (0644) when none exists; a token you set (RAY_AUTH_TOKEN,
    RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) is used as it is. (Its Prometheus metrics ports listen on
    the machine's address: docs/running.md, "Ports and the token".)"""
    if not ray.is_initialized():
        drop_native_lines()  # Ray's known-false core worker error line (ray-project/ray#57733)
        address = os.environ.get("RAY_ADDRESS")
        head = None if address else load_head()
        if address:
            print(f"ray: joining the cluster at RAY_ADDRESS={address}", flush=True)
            ray.init(logging_level=logging.WARNING)
        elif head is not None:
            print(f"ray: joining this checkout's local head (dashboard {head.dashboard_url})", flush=True)
            # "auto" in the head's own temp dir: Ray finds the head there and, given its token, turns
            # token auth on for this process itself, which it does for no explicit address (setting
            # RAY_AUTH_MODE now, after Ray read its config at import, would not take)
            os.environ[TOKEN_ENV] = head.token
            logging.getLogger("ray._private.services").addFilter(ChosenHead(head.ports["port"]))
            ray.init(address="auto", _temp_dir=head.temp_dir, logging_level=logging.WARNING)
        else:
            print(
                "ray: starting a Ray for this command alone (no RAY_ADDRESS, no local head: "
                "`albert-ray local start` keeps one up for every command)",
                flush=True,
            )
            if not (
                os.environ.get(TOKEN_ENV)
                or os.environ.get(TOKEN_PATH_ENV)
                or os.path.exists(os.path.expanduser("~/.ray/auth_token"))
            ):
                os.environ[TOKEN_ENV] = secrets.token_hex(32)
            start_own_ray()
    ray.data.DataContext.get_current().enable_progress_bars = False


class ChosenHead(logging.Filter):
    """Drops Ray's warning that it found several Ray instances on the machine and connects to the one
    the temp dir names, when that one is the local head: `address="auto"` in the head's temp dir is
    how init_ray chooses it, so the warning says only that the choice worked. A connection to any
    other cluster keeps the warning."""

    def __init__(self, port: int):
        super().__init__()
        self.port = str(port)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        chosen = re.search(r"Connecting to latest cluster at [^\s:]+:(\d+)\.", message)
        return not (message.startswith("Found multiple active Ray instances") and chosen and chosen[1] == self.port)


STARTUP_TIMEOUT = "timed out during startup"


API_SERVER_ENV = "RAY_API_SERVER_ADDRESS"


def start_own_ray() -> None:
    """ray.init of a Ray for this command alone. Its dashboard listens on a port picked here, named
    to the cluster's processes (they inherit this environment) as RAY_API_SERVER_ADDRESS: Ray Train's
    helper actors (PlacementGroupCleaner, TrainStateActor) call Ray's state API with no address, which
    otherwise looks the cluster up among the machine's and fails, a traceback in the log, whenever
    another Ray runs there. On a loaded machine its raylet may take longer to register than the 30 s
    Ray waits, which no setting of Ray's raises (ray/_private/node.py, raylet_start_wait_time_s):
    that failure is one line saying so and what to do instead. Its temp dir: own_temp_dir."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dashboard_port = s.getsockname()[1]
    os.environ[API_SERVER_ENV] = f"http://127.0.0.1:{dashboard_port}"
    temp = own_temp_dir()
    try:
        ray.init(logging_level=logging.WARNING, include_dashboard=True, dashboard_port=dashboard_port, _temp_dir=temp)
    except Exception as e:
        if STARTUP_TIMEOUT not in str(e):
            raise
        ray.shutdown()
        raise RayStartTimeout(
            "ray: the Ray this command started did not come up within the 30 s Ray waits for it (Ray "
            "has no setting to wait longer): the machine is busy. Start one that stays up with "
            "`albert-ray local start` (it waits up to 3 minutes) and run the command again: it joins it"
        ) from None


def own_temp_dir() -> str | None:
    """The temp dir of a Ray a command starts for itself: inside a folder only this user may enter
    (local_head.private_temp_dir), instead of Ray's /tmp/ray, which Ray opens to every user of the
    machine (0777) with the cluster's sockets, logs and session files in it; None (Ray's own choice)
    where RAY_TMPDIR names one."""
    if os.environ.get("RAY_TMPDIR"):
        return None
    temp = f"/tmp/ray-albert-u{os.getuid()}/r"
    private_temp_dir(temp)
    return temp


def autoscaler_limits() -> tuple[bool, dict[str, float] | None]:
    """Whether an autoscaler may add nodes to the cluster, and the most resources it can have where
    the autoscaler reports them: the limit of its node types (Ray's v2 autoscaler, KubeRay's), None
    where an autoscaler runs without reporting them (Ray's v1, which the cluster launcher starts) or
    nothing autoscales. Ray Train reads the same limits (through Ray's private state API, as here)."""
    from ray._private import state
    from ray._private.ray_constants import DEBUG_AUTOSCALING_STATUS
    from ray.experimental.internal_kv import _internal_kv_get

    limits = state.state.get_max_resources_from_cluster_config()
    if limits is not None:
        return True, limits
    # The v1 monitor's report. Every head runs that monitor; without an autoscaling config it mirrors
    # the nodes there are (a read-only provider: each node its own type, "node_<id>"), and that cluster
    # cannot grow.
    status = _internal_kv_get(DEBUG_AUTOSCALING_STATUS)
    report = json.loads(status).get("autoscaler_report") if status is not None else None
    types = (report or {}).get("node_type_mapping") or {}
    read_only = all(kind == f"node_{node}" for node, kind in types.items())
    return report is not None and not read_only, None


@dataclass(frozen=True)
class Room:
    """What a cluster that nothing adds nodes to holds of actors needing one `need` each (fixed_room)."""

    per_node: tuple[int, ...]
    """How many each alive node holds, counted against its whole resources."""
    cpus: float
    """All its nodes' CPUs."""
    nodes: str
    """'its nodes: 1 with 2 CPUs; nothing adds nodes to it': how a refusal's line ends."""

    @property
    def total(self) -> int:
        return sum(self.per_node)


def fixed_room(need: dict[str, float]) -> Room | None:
    """The room for actors of `need` each (CPU, GPU, any resource; those above 0 count) on a cluster
    that nothing adds nodes to, what a pool that must all start is checked against before Ray waits
    for ever for room that will not come; None where an autoscaler may add nodes (autoscaler_limits)
    or `need` asks for nothing."""
    if not any(v > 0 for v in need.values()) or autoscaler_limits()[0]:
        return None
    nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
    per_node = tuple(min(math.floor(node.get(k, 0) / v + 1e-9) for k, v in need.items() if v > 0) for node in nodes)
    gpus = need.get("GPU", 0) > 0
    kinds = Counter(resources(r.get("CPU", 0), r.get("GPU", 0) if gpus else None) for r in nodes)
    sizes = ", ".join(f"{n} with {kind}" for kind, n in kinds.most_common())
    return Room(per_node, sum(r.get("CPU", 0) for r in nodes), f"its nodes: {sizes}; nothing adds nodes to it")


def resources(cpus: float, gpus: float | None) -> str:
    """'2 CPUs', '1 CPU and 1 GPU': what an actor needs or a node has (its GPUs where `gpus` is given)."""
    return f"{cpus:g} CPU{'s' * (cpus != 1)}" + (f" and {gpus:g} GPU{'s' * (gpus != 1)}" if gpus is not None else "")


def gpu_capacity() -> tuple[int, int | None]:
    """The cluster's GPUs now, and the most it can have (autoscaler_limits): the limit its autoscaler
    reports, None where an autoscaler runs without reporting one, the count now where nothing autoscales."""
    now = int(ray.cluster_resources().get("GPU", 0))
    grows, limits = autoscaler_limits()
    if limits is not None:
        return now, max(now, int(limits.get("GPU", 0)))
    return now, None if grows else now


def resolve_num_workers(configured: int | None) -> int:
    return configured or max(1, int(ray.cluster_resources().get("CPU", 1)))


def map_units(
    files: list[InputFile],
    num_workers: int,
    fn_cls: type,
    fn_kwargs: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """Run `fn_cls` (a Ray Data class UDF, one unit per call) over the corpus in a pool of
    `num_workers` actors, streaming back the JSON records each call returns."""
    units = pack_units(files, num_workers)
    rows = [{"unit": i, "files": json.dumps([f.to_row() for f in unit])} for i, unit in enumerate(units)]
    log.info("%d files in %d work units over %d workers", len(files), len(units), num_workers)
    ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map_batches(
        fn_cls, fn_constructor_kwargs=fn_kwargs, batch_size=1, compute=ActorPoolStrategy(size=num_workers), num_cpus=1
    )
    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for record in batch["record"]:
                yield json.loads(record)
    except Exception as e:  # a bad input found by a UDF: its one-line error, not Ray's wrapped traceback
        user_error = find_user_error(e)
        if user_error is None:
            raise
        raise user_error from None


def unit_files(batch: dict[str, Any]) -> tuple[int, list[InputFile]]:
    """Decode the one work unit of a `map_units` batch."""
    return int(batch["unit"][0]), [InputFile(**f) for f in json.loads(batch["files"][0])]


TRAIN_SNAPSHOT = "checkpoint_manager_snapshot.json"
"""Ray Train 2.60's record of a run's checkpoints in its storage, from which a restarted run of the
same name resumes: Ray joins each `checkpoint_dir_name` it lists to the run's folder unchecked."""


def check_train_snapshot(run_folder: str) -> None:
    """Before a Ray Train run restores from `run_folder`: every checkpoint folder its snapshot names
    is one folder of the run, reached through no link (the snapshot is a file in storage anyone with
    write access could edit); RefusedPath or BadInput naming it otherwise. Nothing when there is none."""
    path = join(run_folder, TRAIN_SNAPSHOT)
    inside = Contained(run_folder, path)
    data = inside.read_bytes(TRAIN_SNAPSHOT)
    if data is None:
        return
    try:
        snapshot = json.loads(data)
    except ValueError:
        raise BadInput(f"{path} is not JSON: remove it (the run then starts over) or restore it") from None

    def names(value: Any, key: str = "") -> Iterator[Any]:
        if isinstance(value, dict):
            for k, v in value.items():
                yield from names(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from names(v, key)
        elif key.startswith("checkpoint_dir_name") or key.endswith("checkpoint_dir_names"):
            yield value

    for name in names(snapshot):
        if name is None:
            continue
        if isinstance(name, str) and "/" in name:
            raise inside.refuse(name, "is not one checkpoint folder of the run")
        inside.path(name)  # not a plain name, or a link: refused


def quiet_train_run() -> dict[str, Any]:
    """The RunConfig fields of every Ray Train run the stages start (pretraining, a multi-worker
    trial): one line per progress, validation and health line in the job's log. Ray Train's INFO
    lines (each report's TrainingReport, state transitions) stay in its own log files, and the
    workers' print is not also re-logged through Train's logger (it printed each line twice). Their
    workers also call keep_ray_info_off_the_console."""
    import ray.train  # not at import: Ray Data's workers import this module too

    return {
        "logging_config": ray.train.LoggingConfig(log_level="WARNING"),
        "worker_runtime_env": {"env_vars": {PRINT_PATCH_ENV: "0"}},
    }


def keep_ray_info_off_the_console() -> None:
    """Ray Train 2.60 logs every report ("Reporting training result ... TrainingReport(...)") at INFO
    through a logger named by its file's path, not `ray.train`, so its LoggingConfig level does not
    hold it back: below WARNING, records of loggers inside Ray stay off the worker's console handlers
    (the job's log) and still reach Train's own files (logs/train/ray-train-app-worker-*.log)."""
    ray_dir = os.path.dirname(ray.__file__)

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(ray_dir)

    for handler in logging.getLogger().handlers:
        if type(handler) is not logging.FileHandler and type(handler).__name__ != "SessionFileHandler":
            handler.addFilter(keep)
