"""A local autoscaling Ray cluster shaped like cluster/aws.yaml, for `make test-cluster`.

Ray's fake multi-node provider (what Ray's own autoscaler tests use; `ray.cluster_utils.AutoscalingCluster`
builds the same config, but its `start()` runs `ray stop --force`, which would end every Ray on the
machine, and the wheel lacks the example config it reads) starts each worker node as a real raylet
on this machine when the autoscaler asks for one, and stops it when it idles. The node types,
their resources, the worker limits, the upscaling speed and the idle timeout are read from the
launcher config, so the test cluster changes when cluster/aws.yaml does (the idle timeout capped
at IDLE_TIMEOUT_MINUTES). The head is this
project's own (pipelines/cli/local_cluster.py): token auth, free ports, its own temp dir and process
group, stopped by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from pipelines.cli.local_cluster import pick_ports, start_head
from pipelines.stages.local_head import LocalHead, head_temp_dir

from .checks import ray_start_env

REPO = Path(__file__).resolve().parents[2]
SCORER_ENV = "RAY_AUTOSCALER_UTILIZATION_SCORER"
LAUNCHER = REPO / "cluster" / "aws.yaml"
FAKE_HEAD_TYPE = "ray.head.default"  # the fake provider's name for the head's type
# The local cluster's clock, faster than a cloud's: Ray notices a lost node in ~2 s (not ~30: its
# health checks), and Ray Train gives up waiting for a worker group's resources after 10 s (not 60),
# after which an elastic run starts on what is there.
FAST_CLOCK = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "2",
    "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "10",
}


# The launcher config's idle timeout (5 minutes in cluster/aws.yaml), at most this here: the
# scale-down test waits it out after the others, and 5 minutes were half of make test-cluster's time.
# The autoscaler's rule is the same for any timeout; everything else is the launcher config's.
IDLE_TIMEOUT_MINUTES = 2


def idle_timeout_minutes(launcher: dict) -> float:
    return min(launcher["idle_timeout_minutes"], IDLE_TIMEOUT_MINUTES)


def launcher_config(path: Path = LAUNCHER) -> dict:
    return yaml.safe_load(path.read_text())


def fake_cluster_config(launcher: dict, gcs_address: str, temp_dir: str, launch_gate: str) -> dict:
    """The autoscaler config of a fake cluster with the launcher config's node types and limits;
    its nodes' temp folders under `temp_dir`; no node starts while the file `launch_gate` exists."""
    head = launcher["head_node_type"]
    types = {
        name: {
            "resources": dict(spec["resources"]),
            "min_workers": spec.get("min_workers", 0),
            "max_workers": spec["max_workers"],
            "node_config": {},
        }
        for name, spec in launcher["available_node_types"].items()
        if name != head
    }
    types[FAKE_HEAD_TYPE] = {
        "resources": dict(launcher["available_node_types"][head]["resources"]),
        "node_config": {},
        "max_workers": 0,
    }
    empty: dict = {key: [] for key in ("initialization_commands", "setup_commands", "head_setup_commands")}
    empty |= {key: [] for key in ("worker_setup_commands", "head_start_ray_commands", "worker_start_ray_commands")}
    return {
        "cluster_name": launcher["cluster_name"],
        "max_workers": launcher["max_workers"],
        "upscaling_speed": launcher["upscaling_speed"],
        "idle_timeout_minutes": idle_timeout_minutes(launcher),
        "provider": {
            "type": "external",
            "module": "tests.cluster.isolated_nodes.IsolatedFakeProvider",
            "temp_dir": temp_dir,
            "launch_gate": launch_gate,
            "use_node_id_as_ip": True,
            "disable_node_updaters": True,
            "disable_launch_config_check": True,
            "gcs_address": gcs_address,  # the head's own port, not Ray's default 6379
        },
        "available_node_types": types,
        "head_node_type": FAKE_HEAD_TYPE,
        "auth": {},
        "docker": {},
        "file_mounts": {},
        "cluster_synced_files": [],
        "file_mounts_sync_continuously": False,
        "rsync_exclude": [],
        "rsync_filter": [],
        **empty,
    }


def start_autoscaling_head(state_dir: Path, env: dict[str, str], launcher: dict | None = None) -> LocalHead:
    """The head (no task CPUs, as in the launcher config) and its autoscaler; no worker node yet.
    While `state_dir/no-capacity` exists, no node starts (`no_capacity`).

    Every process of the cluster, the nodes the autoscaler starts included, inherits `env`. Worker
    prestart is off: a node with the launcher's 32 logical CPUs would otherwise start 32 Python
    workers on a 2-core machine when the first job arrives."""
    launcher = launcher or launcher_config()
    ports = pick_ports()
    config = state_dir / "autoscaling.json"
    state_dir.mkdir(parents=True, exist_ok=True)
    gcs = f"127.0.0.1:{ports['port']}"
    launch_gate = str(state_dir / "no-capacity")
    config.write_text(json.dumps(fake_cluster_config(launcher, gcs, head_temp_dir(state_dir), launch_gate), indent=2))
    head_resources = launcher["available_node_types"][launcher["head_node_type"]]["resources"]
    # the node-type scorer the launcher's head runs its autoscaler with (spot first, then on demand)
    (command,) = [c for c in launcher["head_start_ray_commands"] if "ray start" in c]
    scorer = {k: v for k, v in ray_start_env(command).items() if k == SCORER_ENV}
    return start_head(
        state_dir,
        num_cpus=int(head_resources.get("CPU", 0)),
        extra_args=(f"--autoscaling-config={config}",),
        extra_env={
            "RAY_FAKE_CLUSTER": "1",
            "AUTOSCALER_UPDATE_INTERVAL_S": "1",
            "RAY_prestart_worker_first_driver": "0",
            # the autoscaler imports the provider from tests/cluster and the scorer from cluster/
            "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'cluster'}",
            **scorer,
            **FAST_CLOCK,
            **env,
        },
        ports=ports,
    )


def dashboard(head: LocalHead, path: str):
    """GET a path of the head's dashboard API with its token; the decoded JSON (an error names the
    path and carries the server's answer)."""
    request = urllib.request.Request(f"{head.dashboard_url}{path}", headers={"Authorization": f"Bearer {head.token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise AssertionError(f"{path}: HTTP {error.code}: {error.read()[:2000]!r}") from error


def train_runs(head: LocalHead) -> list[dict]:
    """The dashboard's Train view: every Ray Train run with its attempts and their workers."""
    return dashboard(head, "/api/train/v2/runs/v1")["train_runs"]


def datasets(head: LocalHead) -> list[dict]:
    """The dashboard's Data view, over every job: each Ray Data dataset with its operators."""
    return [
        dataset
        for job in dashboard(head, "/api/jobs/")
        if job.get("job_id")
        for dataset in dashboard(head, f"/api/data/datasets/{job['job_id']}")["datasets"]
    ]


def state(head: LocalHead, resource: str, **filters: str) -> list[dict]:
    """Ray's state API (`ray list <resource> --detail`) over the head's dashboard, with its token:
    the client library's own calls read the auth mode once, when ray is imported."""
    query = {
        "detail": "1",
        "limit": "10000",
        "filter_keys": list(filters),
        "filter_predicates": ["="] * len(filters),
        "filter_values": list(filters.values()),
    }
    reply = dashboard(head, f"/api/v0/{resource}?{urllib.parse.urlencode(query, doseq=True)}")
    return reply["data"]["result"]["result"]


def worker_nodes(head: LocalHead, alive: bool = True) -> list[dict]:
    """The cluster's worker nodes (not the head), alive or dead."""
    return [n for n in state(head, "nodes") if not n["is_head_node"] and (n["state"] == "ALIVE") == alive]


def autoscaler_events(head: LocalHead) -> list[str]:
    """The autoscaler's cluster events ("Adding 1 node(s) of type cpu_worker.", "Removing ..."), as
    the head's event log has them: the dashboard's cluster-events listing of Ray 2.60 fails (HTTP 500)
    once the autoscaler's events (string timestamps) sit beside other sources' (integer timestamps),
    `result.sort(key=lambda entry: entry["timestamp"])` in ray/dashboard/modules/event/event_head.py."""
    path = Path(head.temp_dir, "session_latest", "logs", "events", "event_AUTOSCALER.log")
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line)["message"] for line in lines if line.strip()]


def _processes() -> dict[int, tuple[int, list[str]]]:
    """{pid: (parent pid, command line)} of this machine's processes, from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parent = int(stat[stat.rindex(")") + 2 :].split()[1])  # the field after the state
                found[int(entry.name)] = (parent, (entry / "cmdline").read_bytes().decode().split("\0"))
    return found


def kill_node(node_id: str) -> int:
    """Lose a worker node at once: SIGKILL to its raylet and every process under it (its workers,
    their actors, its agents), as a machine that vanishes would. Returns how many were killed."""
    processes = _processes()
    raylets = [
        pid
        for pid, (_, cmdline) in processes.items()
        if cmdline[0].endswith("/raylet") and f"--node_id={node_id}" in cmdline
    ]
    assert len(raylets) == 1, f"not one raylet for node {node_id}: {raylets}"
    victims, frontier = set(raylets), list(raylets)
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in processes.items() if ppid == parent and pid not in victims]
        victims.update(children)
        frontier.extend(children)
    for pid in victims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _running(raylets[0]), 10, "the raylet to die", 0.1)
    return len(victims)


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed raylet stays one until the autoscaler reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for(condition, timeout_s: float, what: str, every_s: float = 0.5):
    """Poll `condition` until it returns something truthy; that value, or AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"waited {timeout_s:.0f} s for {what}")


def cluster_env(s3_endpoint: str, home: Path) -> dict[str, str]:
    """The environment of every cluster process: the S3 API (moto here; instance profiles on a real
    cloud) and a HOME of its own, so the test sees anything written under a home directory."""
    return {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "testing"),
        "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "testing"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "HOME": str(home),
        # Ray Train's controller polls its workers every 2 s by default; a test that waits for it does not
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
    }


@contextlib.contextmanager
def no_capacity(state_dir: Path):
    """No new node starts while in this block (launches wait), as when a cloud has no spot capacity."""
    gate = state_dir / "no-capacity"
    gate.touch()
    try:
        yield
    finally:
        gate.unlink()
