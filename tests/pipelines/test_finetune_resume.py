"""A fine-tuning search killed midway resumes: `python -m tests.pipelines.killed_search` runs the
finetune stage and kills its whole process group once the first trial has finished and the second
has reported two epochs; the next run restores the search from the stage's unfinished build. The
search's callback records every result both runs' trials report."""

import csv
import json
import os
import subprocess
import sys

import pytest

from pipelines.config import load_config

from .family_tasks import topics


@pytest.mark.slow
def test_a_search_killed_after_its_first_trial_resumes_without_rerunning_it(ray_session, tiny_pretrained, tmp_path):
    from pipelines.stages.finetune import run_finetune

    rows = topics(60, 0)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{r['text']},{r['topics'][0]}\n" for r in rows))
    overrides = [
        f"run_dir={tmp_path}/run",
        f"finetune.pretrained={tiny_pretrained}",
        f"finetune.train_path={tmp_path}/train.csv",
        "finetune.max_seq_length=16",
        "tune.num_samples=2",
        "tune.max_concurrent_trials=1",
        "tune.scheduler=none",
        "tune.space={finetune.lr: {loguniform: [0.0001, 0.01]}, finetune.batch_size: 16, finetune.epochs: 3}",
    ]
    record = tmp_path / "results.jsonl"
    env = {**os.environ, "RAY_ADDRESS": ray_session.get_runtime_context().gcs_address}
    killed = subprocess.run(
        [sys.executable, "-m", "tests.pipelines.killed_search", str(record), *overrides],
        env=env,
        start_new_session=True,  # its own process group: the kill takes the driver and nothing of the test
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stdout[-3000:] + killed.stderr[-3000:]
    before = [json.loads(line) for line in record.read_text().splitlines()]
    first, second = list(dict.fromkeys(r["trial"] for r in before))
    assert [r["epoch"] for r in before if r["trial"] == first] == [1, 2, 3]
    assert [r["epoch"] for r in before if r["trial"] == second] == [1, 2]
    assert not (tmp_path / "run" / "finetune").exists()  # nothing committed; the unfinished build waits

    config = load_config(overrides=overrides)
    out = run_finetune(config)
    after = [json.loads(line) for line in record.read_text().splitlines()][len(before) :]
    assert {r["pid"] for r in after} == {os.getpid()}  # recorded by the restored search in this process
    assert [r["epoch"] for r in after if r["trial"] == first] == []  # finished: not rerun
    # unfinished: continued from the last checkpoint the search had recorded (epoch 1 or 2: the
    # kill came while the second epoch's result was being handled), not from the start
    resumed = [r["epoch"] for r in after if r["trial"] == second]
    assert resumed in ([2, 3], [3]), resumed
    with open(os.path.join(out, "trials.csv")) as f:
        trials = list(csv.DictReader(f))
    assert sorted(t["trial_id"] for t in trials) == sorted([first, second])
    assert [t["status"] for t in trials] == ["completed", "completed"]
    assert [t["epochs_run"] for t in trials] == ["3", "3"]
    assert "trainer_state.pt" not in os.listdir(os.path.join(out, "best"))  # training state stays out of the export
