"""Issue #16 on one machine: the whole DAG on an autoscaling cluster shaped like cluster/aws.yaml
(tests/cluster/autoscaling.py), run_dir on s3:// (moto) and no other shared path, submitted with
`ray job submit`; a worker node lost in the data stage and in pretraining; elastic 2 -> 1 -> 2.

`make test-cluster` runs these (`pytest --cluster -m cluster`); `make test` leaves them out. The
tests share one cluster and run in order: the DAG from zero worker nodes first, the node losses on
the nodes it left, and last the wait for every worker node to be removed after the idle timeout.
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from safetensors.torch import load as load_safetensors

from pipelines.cli.local_cluster import submit
from pipelines.stages.local_head import LocalHead
from pipelines.storage import exists, filesystem, read_bytes, read_jsonl, write_text
from tests.faults import Faults

from .autoscaling import (
    autoscaler_events,
    cluster_env,
    datasets,
    idle_timeout_minutes,
    kill_node,
    launcher_config,
    no_capacity,
    start_autoscaling_head,
    state,
    train_runs,
    wait_for,
    worker_nodes,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUCKET = "cluster-runs"
# The tiny recipe, with its worker counts fixed: data.num_workers (null: the CPUs the cluster has
# when the stage starts) would differ between a cluster at zero and one with a warm 32-CPU node.
TINY = ["--config", "configs/tiny.yaml", "data.num_workers=2"]
# One training worker per node (the node type's CPUs), computing on one thread: a lost node is a lost worker.
NODE_CPUS = int(launcher_config()["available_node_types"]["cpu_worker"]["resources"]["CPU"])
ELASTIC = [
    "train.num_workers=[1, 2]",
    f"train.cpus_per_worker={NODE_CPUS}",
    "train.torch_threads=1",
    "train.max_steps=8",
    "train.checkpoint_every=1",
    # a lost node is one failure; each try to start on a node that is gone (Ray Train's view of the
    # cluster lags up to 20 s) times out as one more
    "train.max_failures=5",
    "train.resize_check_s=2",
]


@dataclass
class Cluster:
    head: LocalHead
    home: Path
    """The HOME of every process of the cluster."""
    state_dir: Path


@pytest.fixture(scope="module")
def cluster(s3_endpoint, tmp_path_factory):
    home, state_dir = tmp_path_factory.mktemp("home"), tmp_path_factory.mktemp("autoscaling")
    head = start_autoscaling_head(state_dir, cluster_env(s3_endpoint, home))
    filesystem(f"s3://{BUCKET}/x")[0].mkdir(BUCKET)
    yield Cluster(head, home, state_dir)
    head.stop(timeout_s=10)


def job(head, *args, env: dict | None = None) -> str:
    """Submit `args` as a Ray job (the repository as its working dir); its output, or fail with it."""
    rc, output = submit(head, list(args), echo=False, env=env)
    assert rc == 0, output[-4000:]
    return output


def files_under(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def dag_run(cluster):
    """The whole DAG, submitted while the cluster has no worker node: (its output, new local files)."""
    head, home = cluster.head, cluster.home
    assert worker_nodes(head) == [], "the cluster must start from zero worker nodes"
    repo_before = files_under(REPO)
    output = job(head, "python", "pipelines/full_run.py", *TINY, f"run_dir=s3://{BUCKET}/dag")
    return output, sorted(files_under(home)), sorted(files_under(REPO) - repo_before)


def test_the_dag_runs_on_nodes_the_autoscaler_starts_for_it(cluster, dag_run):
    """Acceptance 1 (the scale-up half; the scale-down is the last test of this module)."""
    head = cluster.head
    output, _, _ = dag_run
    assert "full_run: report:" in output and "FAILED" not in output
    for path in ("vocab/spiece.model", "data/manifest.json", "pretrain/hf/model.safetensors", "report/report.md"):
        assert exists(f"s3://{BUCKET}/dag/{path}"), path
    added = [e for e in autoscaler_events(head) if e.startswith("Adding")]
    # the spot type first (cluster/spot_fallback.py's scorer, which the head's autoscaler runs with)
    assert added and "of type cpu_worker_spot" in added[0], autoscaler_events(head)
    assert all("of type cpu_worker" in e for e in added), autoscaler_events(head)
    assert worker_nodes(head), "the nodes started for the DAG are still there (idle, before the timeout)"
    # the launcher's (v1) autoscaler does not say whether it can add GPU nodes: auto trains on CPUs, and says so
    assert "train.use_gpu=auto found no GPU in the cluster, and its autoscaler does not say" in output


def test_the_dashboard_shows_the_pretraining_and_the_data_stage(cluster, dag_run):
    """What a user watches in the dashboard during the run: the Train view lists the pretraining run
    (its attempts and workers), the Data view the data stage's datasets and their operators."""
    runs = [r for r in train_runs(cluster.head) if r["name"] == "train"]
    assert runs and runs[0]["status"] == "FINISHED", runs
    assert all(len(a["workers"]) >= 1 for a in runs[0]["attempts"])
    finished = [d for d in datasets(cluster.head) if d["state"] == "FINISHED"]
    # each operator as the dashboard lists it: its tag ("operator", e.g. "MapBatches(CreateExamplesFn)_3") and fields
    operators = {f"{op['operator']} {op.get('name', '')}" for d in finished for op in d["operators"]}
    assert any("CreateExamplesFn" in name for name in operators), operators
    assert any("SampleSentencesFn" in name for name in operators), operators


def test_nothing_is_written_outside_run_dir_and_the_nodes_temp_folders(dag_run):
    """Acceptance 5: the run_dir is on s3, the nodes' Ray temp folders are their own; the home
    directory every cluster process had and the working tree the job was submitted from stay as
    they were."""
    _, home_files, new_repo_files = dag_run
    assert home_files == []
    assert new_repo_files == []


def read_examples(run_dir: str, split: str) -> dict[str, bytes]:
    fs, path = filesystem(f"{run_dir}/data/{split}")
    return {name.rsplit("/", 1)[1]: fs.cat_file(name) for name in sorted(fs.glob(f"{path}/*.parquet"))}


def copy_stage(source: str, target: str, stage: str) -> None:
    fs, src = filesystem(f"{source}/{stage}")
    _, dst = filesystem(f"{target}/{stage}")
    for name in fs.find(src):
        fs.copy(name, dst + name[len(src) :])


def test_a_node_lost_in_the_data_stage_changes_no_example(cluster, dag_run):
    """Acceptance 4: the node running the data stage's actors dies after the first shard is written;
    Ray Data redoes the lost work units on a node the autoscaler starts, and the output is the same
    files, byte for byte, as the undisturbed run of the DAG above."""
    head = cluster.head
    run_dir = f"s3://{BUCKET}/data-loss"
    copy_stage(f"s3://{BUCKET}/dag", run_dir, "vocab")
    done: dict = {}
    thread = threading.Thread(
        target=lambda: done.update(
            output=job(head, "python", "-m", "pipelines.cli", "data", *TINY, f"run_dir={run_dir}")
        )
    )
    thread.start()
    fs, building = filesystem(f"{run_dir}/_building/data/train")
    wait_for(lambda: fs.glob(f"{building}/*.parquet"), 180, "the first shard")
    nodes = [n["node_id"] for n in worker_nodes(head)]
    assert len(nodes) == 1
    assert kill_node(nodes[0]) > 1
    thread.join(timeout=600)
    assert "output" in done, "the data job did not finish"
    for split in ("train", "validation"):
        assert read_examples(run_dir, split) == read_examples(f"s3://{BUCKET}/dag", split), split
    ids = pq.read_table(io.BytesIO(next(iter(read_examples(run_dir, "train").values()))))["example_id"]
    assert len(ids) > 0


def final_weights(run_dir: str) -> dict:
    return load_safetensors(read_bytes(f"{run_dir}/pretrain/hf/model.safetensors"))


def assert_same_weights(a: dict, b: dict, atol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= atol, worst


def pretrain(head, run_dir: str, *overrides: str, env: dict | None = None) -> str:
    copy_stage(f"s3://{BUCKET}/dag", run_dir, "vocab")
    copy_stage(f"s3://{BUCKET}/dag", run_dir, "data")
    return job(head, "python", "-m", "pipelines.cli", "pretrain", *TINY, f"run_dir={run_dir}", *overrides, env=env)


def train_workers(head) -> set[str]:
    """The nodes of the alive Ray Train workers."""
    return {w["node_id"] for w in state(head, "actors", class_name="RayTrainWorker", state="ALIVE")}


def held(head, run_dir: str, step: int) -> int:
    """Once the run waits after `step`: on how many workers."""
    wait_for(lambda: exists(f"{run_dir}/_building/pretrain/held_at_{step}"), 300, f"the run to wait after step {step}")
    time.sleep(3)  # the controller registers the step's checkpoint at its next poll (every 0.5 s here)
    return len(train_workers(head))


def release(run_dir: str, step: int) -> None:
    write_text(f"{run_dir}/_building/pretrain/release_{step}", "")


def test_a_node_lost_in_pretraining_shrinks_then_grows_the_run_exactly(cluster, dag_run):
    """Acceptances 2 and 3. An elastic run of 1-2 workers, one worker per node, a checkpoint at every
    step: it starts on what the cluster has and grows to 2 workers when the autoscaler adds a node
    (waiting after step 1 until then). After step 3 a node dies (with any idle node) while the cloud
    has no capacity for a replacement: the run goes on with 1 worker from step 3. After step 4 capacity returns, the
    autoscaler replaces the node and Ray Train grows the run back to 2 workers from step 4. The
    result equals a fixed 1-worker run and the same config run without a loss, within 1e-5, and
    metrics.jsonl records every resize."""
    head = cluster.head
    run_dir = f"s3://{BUCKET}/node-loss"
    done: dict = {}
    thread = threading.Thread(
        target=lambda: done.update(output=pretrain(head, run_dir, *ELASTIC, env=Faults(hold_after=(1, 3, 4)).env()))
    )
    thread.start()
    if held(head, run_dir, 1) == 2:
        release(run_dir, 1)  # it started on 2 workers: nothing to grow (on 1, the grow ends the wait)
    assert held(head, run_dir, 3) == 2
    nodes = train_workers(head)
    with no_capacity(cluster.state_dir):
        # one training worker's node dies, and so does any idle node the earlier tests left: the
        # survivor is the only node there is
        spare = {n["node_id"] for n in worker_nodes(head)} - nodes
        for node in [sorted(nodes)[0], *spare]:
            kill_node(node)
        workers = held(head, run_dir, 4)
        assert workers == 1, (workers, state(head, "actors", class_name="RayTrainWorker"), worker_nodes(head))
    thread.join(timeout=900)  # the replacement node ends the wait: Ray Train regrows the run
    assert "output" in done, "the elastic pretraining job did not finish"
    events = [
        (r["event"], r["step"], r.get("from_workers"), r["num_workers"])
        for r in read_jsonl(f"{run_dir}/pretrain/metrics.jsonl")
        if "event" in r
    ]
    shrink = ("resized", 3, 2, 1)
    assert shrink in events, events
    starts = (
        [("started", 0, None, 2)],
        [("started", 0, None, 1), ("resized", 1, 1, 2)],  # grown after step 1's checkpoint
        [("started", 0, None, 1), ("started", 0, None, 2)],  # grown before any checkpoint: started anew
    )
    assert events[: events.index(shrink)] in starts, events
    assert events[events.index(shrink) :] == [shrink, ("resized", 4, 1, 2)], events
    elastic = final_weights(run_dir)
    pretrain(head, f"s3://{BUCKET}/fixed-1", *ELASTIC, "train.num_workers=1")
    assert_same_weights(elastic, final_weights(f"s3://{BUCKET}/fixed-1"))
    pretrain(head, f"s3://{BUCKET}/uninterrupted", *ELASTIC)
    assert_same_weights(elastic, final_weights(f"s3://{BUCKET}/uninterrupted"))


def test_worker_nodes_are_removed_after_the_idle_timeout(cluster, dag_run):
    """Acceptance 1, the scale-down: once the jobs are done, every worker node the autoscaler
    started goes away after the idle timeout (the launcher config's, capped for this rehearsal at
    IDLE_TIMEOUT_MINUTES), plus the autoscaler's poll."""
    head = cluster.head
    idle_s = idle_timeout_minutes(launcher_config()) * 60
    started = time.monotonic()
    wait_for(lambda: not worker_nodes(head), idle_s + 90, "the idle worker nodes to be removed", every_s=5)
    assert time.monotonic() - started <= idle_s + 90
    removed = [e for e in autoscaler_events(head) if e.startswith("Removing")]
    assert any("(idle)" in e for e in removed), removed
    assert len(worker_nodes(head, alive=False)) >= 2  # the DAG's node and the replacements after the losses
    print(json.dumps({"events": autoscaler_events(head)}, indent=1))
