"""A fine-tuning search killed midway resumes: `python -m tests.pipelines.killed_search` runs the
finetune stage's 3-trial search and kills its whole process group once the first trial has finished
and the second has reported two epochs; the next run resumes the search from its journal in the
stage's unfinished build, and runs the third trial the uninterrupted search would have. A callback
added to the search's own records every result both runs' trials report. Every pickle the
interrupted search left in its folder is replaced, before the resume, by one that would run code:
none runs, since a resume reads none of them."""

import csv
import json
import os
import pathlib
import pickle
import subprocess
import sys

import pytest

from pipelines.config import load_config

from .family_tasks import topics


class Touch:
    """Unpickled, it creates `path`: what any code a crafted pickle carries could do."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


def plant_pickles(folder: pathlib.Path, sentinels: pathlib.Path) -> list[str]:
    """A tuner.pkl (what Tuner.restore loads) in each Ray Tune experiment folder under `folder`, and
    each pickle Tune left there (searcher and trial pickles, the cloudpickle payloads of its
    experiment state), made a Touch of its own sentinel file."""
    for experiment_state in folder.rglob("experiment_state-*.json"):
        (experiment_state.parent / "tuner.pkl").touch()
    planted = []
    for path in sorted(folder.rglob("*")):
        name = str(path.relative_to(folder)).replace(os.sep, "__")
        payload = pickle.dumps(Touch(sentinels / name))
        if path.suffix == ".pkl" or path.name.startswith(("basic-variant-state-", "searcher-state-")):
            path.write_bytes(payload)
        elif path.name.startswith("experiment_state-"):
            blob = {"_type": "CLOUDPICKLE_FALLBACK", "value": payload.hex()}
            path.write_text(json.dumps({"trial_data": blob, "runner_data": blob}))
        else:
            continue
        planted.append(name)
    return planted


@pytest.mark.slow
@pytest.mark.e2e  # a killed process and a resumed search: make test-e2e
def test_a_search_killed_after_its_first_trial_resumes_without_rerunning_it(
    ray_session, tiny_pretrained, tmp_path, monkeypatch
):
    from pipelines.stages import tune_search
    from pipelines.stages.finetune import run_finetune
    from pipelines.stages.tune_search import build_search_space, draw_configs

    from .killed_search import recording

    rows = topics(60, 0)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{r['text']},{r['topics'][0]}\n" for r in rows))
    overrides = [
        f"run_dir={tmp_path}/run",
        f"finetune.pretrained={tiny_pretrained}",
        f"finetune.train_path={tmp_path}/train.csv",
        "finetune.max_seq_length=16",
        "tune.num_samples=3",
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
    sentinels = tmp_path / "ran"
    sentinels.mkdir()
    planted = plant_pickles(tmp_path / "run" / "_building" / "finetune" / "_scratch", sentinels)
    assert any(name.endswith("tuner.pkl") for name in planted), planted

    config = load_config(overrides=overrides)
    monkeypatch.setattr(tune_search, "search_callbacks", recording(str(record)))
    try:
        out = run_finetune(config)
    finally:  # whatever the resume did: nothing it read from the run_dir was unpickled
        assert sorted(os.listdir(sentinels)) == []
    after = [json.loads(line) for line in record.read_text().splitlines()][len(before) :]
    assert {r["pid"] for r in after} == {os.getpid()}  # recorded by the resumed search in this process
    assert [r["epoch"] for r in after if r["trial"] == first] == []  # finished: not rerun
    # unfinished: continued from the last checkpoint the search had recorded (epoch 1 or 2: the
    # kill came while the second epoch's result was being handled), not from the start
    resumed = [r["epoch"] for r in after if r["trial"] == second]
    assert resumed in ([2, 3], [3]), resumed
    third = [r["trial"] for r in after if r["trial"] not in (first, second)]
    assert [r["epoch"] for r in after if r["trial"] in third] == [1, 2, 3]
    with open(os.path.join(out, "trials.csv")) as f:
        trials = list(csv.DictReader(f))
    assert [t["trial_id"] for t in trials] == [first, second, third[0]]
    assert [t["status"] for t in trials] == ["completed"] * 3
    assert [t["epochs_run"] for t in trials] == ["3"] * 3
    # the very draws of an uninterrupted search with this seed, in order
    drawn = draw_configs(build_search_space(config.tune), 3, config.tune.seed)
    assert [float(t["finetune.lr"]) for t in trials] == [d["finetune.lr"] for d in drawn]
    assert "trainer_state.pt" not in os.listdir(os.path.join(out, "best"))  # training state stays out of the export
