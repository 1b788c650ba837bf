"""The whole job on a real local cluster (`ray start` + `ray job submit`), resumable stage by stage,
with its run_dir on s3://, and a command joining that cluster (which stages run, pure: test_dag.py)."""

import csv
import json
import os
import re
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from pipelines.rundir.lease import LEASE_FILE

from .runs import TINY

pytestmark = pytest.mark.e2e  # minutes of real job submissions: make test-e2e

STAGE_NAMES = ["vocab", "data", "pretrain", "finetune", "report"]
OUTPUTS = [
    "vocab/spiece.model",
    "data/train",
    "data/validation",
    "data/manifest.json",
    "pretrain/metrics.jsonl",
    "pretrain/eval.json",
    "pretrain/hf/model.safetensors",
    "pretrain/hf/config.json",
    "finetune/trials.csv",
    "finetune/best.json",
    "finetune/best/config.json",
    "costs/vocab.json",
    "costs/pretrain.json",
    "report/manifest.json",
    "report/report.md",
    "report/pretraining_curves.png",
    "report/layer_transitions.png",
    ".albert-ray.json",
    "pretrain/.albert-ray.json",
]


# issue #45: lines that were in every job's log and are not the job's (each removed at its source)
NOISE = (
    "is now ignored by default when packaging",  # the upload: .rayignore and .gitignore say it
    "Ignoring upload to cluster for these files",
    "torch.distributed is disabled, unavailable or uninitialized",  # DCP on one rank, asked for
    "Configuration for experiment",  # Ray Tune's box, its hints naming the deleted _scratch/
    "View detailed results here",
    "To visualize your results with TensorBoard",
    "Wrote the latest version of all result files",
    "Checkpoint successfully created at",
    "has constructor arguments in the object store and max_restarts > 0",  # pipelines/native_stderr.py
    "exclude_resources",  # Ray Train's own deprecated argument (pipelines/__init__.py)
    "Found multiple active Ray instances",  # the state API in Ray Train's helper actors
    "timed out during startup",  # a Ray start too slow for a loaded machine: one line of ours instead
    "Connecting to existing Serve app",
)


@pytest.fixture(scope="module")
def head(tmp_path_factory, s3_endpoint):
    from pipelines.cli.local_cluster import start_head
    from pipelines.stages.local_head import group_alive

    head = start_head(tmp_path_factory.mktemp("ray-head"), num_cpus=4)
    yield head
    # a 3 s grace, then SIGKILL to its process group: after jobs, `ray start --block` drains its node for
    # up to 30 s (an idle head stops in ~4 s); nothing of this throwaway head needs a graceful end
    head.stop(timeout_s=3)
    assert not group_alive(head.pid)  # this head, and only it: its own process group


@pytest.mark.slow
def test_a_stage_command_joins_the_local_head_and_starts_no_ray_of_its_own(head, tmp_path):
    """Issue #45: without RAY_ADDRESS a command uses the checkout's local head when it is up (here
    the module's, named by ALBERT_RAY_LOCAL_DIR as `albert-ray local start` would record it), says
    so, and runs as a driver of that cluster instead of paying for a Ray of its own."""
    import subprocess
    import sys
    import urllib.request
    from dataclasses import asdict

    from pipelines.stages.local_head import LOCAL_DIR_ENV, state_file, write_private

    local = tmp_path / "local"
    local.mkdir()
    write_private(state_file(local), json.dumps(asdict(head)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    command = [str(Path(sys.executable).parent / "albert-ray"), "vocab", "--config", TINY, f"run_dir={tmp_path}/run"]
    done = subprocess.run(command, env={**env, LOCAL_DIR_ENV: str(local)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ray: joining this checkout's local head (dashboard {head.dashboard_url})" in done.stdout
    assert "ray: starting a Ray" not in done.stdout and (tmp_path / "run" / "vocab" / "spiece.model").exists()
    request = urllib.request.Request(
        head.dashboard_url + "/api/jobs/", headers={"Authorization": f"Bearer {head.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        jobs = json.load(response)
    drivers = [j for j in jobs if j.get("type") == "DRIVER" and " vocab --config " in (j.get("entrypoint") or "")]
    assert len(drivers) == 1 and drivers[0]["status"] == "SUCCEEDED", jobs


@pytest.mark.slow
def test_a_small_jobs_log_has_its_bad_row_and_none_of_the_noise(first_submission, head, job_run_dir, tmp_path):
    """Issue #45, acceptance 3: `albert-ray predict` joining the head as a driver, its rows on a pool
    of Ray Data actors (predict.workers=1: the actor pool whose creation made Ray's core worker print
    its false max_restarts error), over rows one of which is empty: the log says that row was
    rejected and has no line of the noise list."""
    import subprocess
    import sys
    from dataclasses import asdict

    from pipelines.stages.local_head import LOCAL_DIR_ENV, state_file, write_private

    assert first_submission[0] == 0
    local = tmp_path / "local"
    local.mkdir()
    write_private(state_file(local), json.dumps(asdict(head)))
    rows = tmp_path / "rows.csv"
    rows.write_text('text\n"shares rose as the bank reported profits"\n""\n"the minister said the vote was near"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_AUTH"))}
    command = [
        str(Path(sys.executable).parent / "albert-ray"),
        "predict",
        f"run_dir={tmp_path}/run",
        f"predict.model={job_run_dir}/finetune/best",
        f"predict.input={rows}",
        "predict.workers=1",
    ]
    done = subprocess.run(command, env={**env, LOCAL_DIR_ENV: str(local)}, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "ray: joining this checkout's local head" in output
    assert re.search(r"predict: 2 of 3 rows predicted, 1 rejected \(\{'[^']+': 1\}\)", output), output
    for noise in NOISE:
        assert noise not in output, noise


@pytest.fixture(scope="module")
def job_run_dir(s3_endpoint):
    from pipelines.storage import filesystem

    bucket = f"jobs-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    filesystem(f"s3://{bucket}/x")[0].mkdir(bucket)
    return f"s3://{bucket}/run"


TWO_WORKERS = ["train.num_workers=2"]  # a setting: it changes no fingerprint
S3_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


def submit_full_run(head, run_dir, *args):
    """`python pipelines/full_run.py` on tiny.yaml with pretraining on two workers and each
    fine-tuning trial a two-worker Ray Train job, the job's environment holding the S3 endpoint and
    its keys (as a cluster's would)."""
    from pipelines.cli.local_cluster import submit

    rc, output = submit(
        head,
        [
            "python",
            "pipelines/full_run.py",
            "--config",
            "configs/tiny.yaml",
            f"run_dir={run_dir}",
            "train.num_workers=2",
            "tune.workers_per_trial=2",
            *args,
        ],
        echo=False,
        env={k: os.environ[k] for k in S3_ENV},
    )
    print(output)
    return rc, output


EVERY_STAGE = dict.fromkeys(STAGE_NAMES, "done")


def stage_lines(output):
    """{stage: 'done' | 'skipped'} from the DAG's per-stage lines. Searched anywhere in a line: the
    job's log stream can join the driver's line to a stage actor's unterminated one ("...nothing to
    dofull_run: vocab: up to date, skipped", seen once in CI)."""
    pattern = re.compile(rf"full_run: ({'|'.join(STAGE_NAMES)}): (up to date, skipped)?")
    return {m.group(1): "skipped" if m.group(2) else "done" for m in pattern.finditer(output)}


def manifests(run_dir):
    from pipelines.storage import exists, read_json

    return {n: read_json(f"{run_dir}/{n}/manifest.json") for n in STAGE_NAMES if exists(f"{run_dir}/{n}/manifest.json")}


@pytest.fixture(scope="module")
def concurrent_submissions(head, job_run_dir):
    """The first submission (every stage), and a second one on the same run_dir, with another
    config, submitted while the first holds the run_dir: (first, second, the first's lease)."""
    first: dict = {}
    thread = threading.Thread(target=lambda: first.update(result=submit_full_run(head, job_run_dir)))
    thread.start()
    from pipelines.storage import exists, read_json

    lease, deadline = f"{job_run_dir}/{LEASE_FILE}", time.time() + 180
    while time.time() < deadline and not exists(lease):
        time.sleep(0.1)
    holder = read_json(lease)
    second = submit_full_run(head, job_run_dir, "train.lr=0.02")
    thread.join()
    return first["result"], second, holder


@pytest.fixture(scope="module")
def first_submission(concurrent_submissions):
    return concurrent_submissions[0]


@pytest.fixture(scope="module")
def failed_submission(first_submission, head, job_run_dir):
    """Then `--force data` with a config error only the pretrain stage detects (more sequences per
    batch than examples), in a submission whose pretraining config differs from the complete
    output's: vocab is skipped, the forced data stage runs again, pretrain fails. (Its result, the
    manifests before it.)"""
    before = manifests(job_run_dir)
    return submit_full_run(head, job_run_dir, "--force", "data", "train.global_batch_size=100000"), before


@pytest.mark.slow
def test_a_failing_stage_stops_the_dag_names_itself_last_and_keeps_the_complete_outputs(failed_submission, job_run_dir):
    (rc, output), before = failed_submission
    assert rc == 1 and "' failed" in output  # the CLI's "Job 'raysubmit_...' failed"
    dag_lines = [line for line in output.splitlines() if line.startswith("full_run: ")]
    assert dag_lines[-2].startswith("full_run: FAILED at stage pretrain after ")
    assert "BadInput: train.global_batch_size=100000 exceeds the" in dag_lines[-2]
    assert "outputs of the stages before pretrain are complete" in dag_lines[-1]
    assert "Unhandled error" not in output  # the later stages' errors are taken, not printed again
    after = manifests(job_run_dir)
    # the failed stage and those after it replaced nothing: their complete outputs stay
    assert [after[n] == before[n] for n in ("pretrain", "finetune", "report")] == [True, True, True]


@pytest.mark.slow
def test_the_first_submission_makes_every_output_on_s3(first_submission, job_run_dir, tmp_path):
    """The whole DAG on s3://: every output, the cost records and the report; pretraining on two
    workers, each writing its shard of the checkpoints there; an export transformers loads."""
    from transformers import AlbertForPreTraining as HFAlbertForPreTraining

    from pipelines.storage import exists, filesystem, read_bytes, read_json

    rc, output = first_submission
    assert rc == 0 and "succeeded" in output
    assert stage_lines(output) == EVERY_STAGE
    for path in OUTPUTS:
        assert exists(f"{job_run_dir}/{path}"), path
    assert set(manifests(job_run_dir)) == set(STAGE_NAMES)
    costs = {n: read_json(f"{job_run_dir}/costs/{n}.json") for n in STAGE_NAMES}
    assert costs["pretrain"]["fingerprint"] == manifests(job_run_dir)["pretrain"]["fingerprint"]
    assert costs["pretrain"]["cpu_hours"] > 0 and costs["pretrain"]["wall_s"] > 0
    report = read_bytes(f"{job_run_dir}/report/report.md").decode()
    assert "| pretrain |" in report and "| data | " in report and "| ran outside the DAG |" not in report
    fs, root = filesystem(job_run_dir)
    files = {p.split("/run/pretrain/", 1)[1] for p in fs.find(f"{root}/pretrain")}
    checkpoint = sorted({f.split("/")[1] for f in files if f.startswith("train/checkpoint_") and f.count("/") == 2})[-1]
    shards = (".metadata", "__0_0.distcp", "__1_0.distcp", "train_state.json")
    assert {f"train/{checkpoint}/{name}" for name in shards} <= files, files
    fs.get(f"{root}/pretrain/hf", str(tmp_path / "hf"), recursive=True)
    HFAlbertForPreTraining.from_pretrained(tmp_path / "hf")
    # the trial, a two-worker Ray Train job, kept its checkpoints in the search's storage on s3, where
    # the best one was read back through the storage's filesystem (its path has no scheme)
    trials = list(csv.DictReader(read_bytes(f"{job_run_dir}/finetune/trials.csv").decode().splitlines()))
    assert len(trials) == 1 and trials[0]["status"] == "completed" and trials[0]["epochs_run"] == "1"
    best = read_json(f"{job_run_dir}/finetune/best.json")
    assert best["value"] == float(trials[0]["accuracy"])
    labels = ["business", "entertainment", "politics", "sports", "tech"]
    assert best["label_names"] == labels
    id2label = read_json(f"{job_run_dir}/finetune/best/config.json")["id2label"]
    assert id2label == {str(i): n for i, n in enumerate(labels)}


@pytest.mark.slow
def test_the_job_log_says_each_pretraining_line_once(first_submission):
    """Issue #17, acceptance 5: each progress and validation line of pretraining once, with the stage's
    name, and none of Ray Train's report dicts (they stay in its own log files), of pretraining's run
    nor of the two-worker fine-tuning trial's."""
    rc, output = first_submission
    assert rc == 0
    ours = [line for line in output.splitlines() if re.search(r"pretrain: step \d+", line)]
    assert any("validation: mlm_acc" in line for line in ours) and any("/" in line for line in ours), output[-3000:]
    assert [line for line, n in Counter(ours).items() if n > 1] == []
    assert "TrainingReport(" not in output
    for noise in NOISE:
        assert noise not in output, noise


def test_a_second_run_on_the_run_dir_stops_at_once_naming_the_first(concurrent_submissions, job_run_dir):
    from pipelines.storage import exists

    (rc, output), (second_rc, second_output), holder = concurrent_submissions
    assert holder["job"].startswith("raysubmit_") and f"Job '{holder['job']}'" in output
    assert second_rc != 0 and f"Job '{holder['job']}'" not in second_output
    # one line (Ray's "job failed" status message repeats the log's last lines)
    error = sorted({line for line in second_output.splitlines() if line.startswith("full_run: error: ")})
    assert len(error) == 1 and f"run_dir {job_run_dir} is in use by `python pipelines/full_run.py " in error[0]
    assert f"Ray job {holder['job']};" in error[0]
    assert "full_run: pretrain:" not in second_output  # it ran nothing
    # the first completed untouched: its config, not the second's
    assert rc == 0 and manifests(job_run_dir)["pretrain"]["config"]["train"]["lr"] == 0.01
    assert not exists(f"{job_run_dir}/{LEASE_FILE}") and not exists(f"{job_run_dir}/_building/pretrain")


@pytest.mark.slow
def test_the_next_submission_skips_what_is_done_and_reruns_a_forced_stage_and_what_follows(
    failed_submission, job_run_dir
):
    """The failing submission's `--force data`: the stage before the forced one is skipped (up to
    date), the forced one runs again and commits, the one after it runs (and fails). Every stage
    skipped is the s3 DAG test's second pass; --force from any stage is the same rule
    (test_select_stages_orders_and_forces_from_a_stage_on)."""
    (rc, output), before = failed_submission
    assert stage_lines(output) == {"vocab": "skipped", "data": "done"}
    after = manifests(job_run_dir)
    assert after["vocab"] == before["vocab"]
    assert after["data"] != before["data"]  # rerun: a new commit
    assert after["data"]["fingerprint"] == before["data"]["fingerprint"]  # of the same config and inputs
