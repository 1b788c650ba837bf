"""The full-run DAG: which stages run (pure, no Ray), and the whole job on a real local cluster
(`ray start` + `ray job submit`), resumable stage by stage, over local disk and s3://."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import full_run
from pipelines.config import load_config
from pipelines.stages import stage_fingerprint

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "configs" / "tiny.yaml")


def commit(config, name):
    """Leave the manifest a completed stage leaves (its fingerprint from its inputs' manifests)."""
    folder = Path(config.run_dir, name)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"fingerprint": stage_fingerprint(config, name)}))


def statuses(config, stages=None, force=None):
    selected, forced = full_run.select_stages(stages, force)
    return {p.name: p.status for p in full_run.plan_dag(config, selected, forced)}


def test_select_stages_orders_and_forces_from_a_stage_on():
    assert full_run.select_stages(None, None) == (["vocab", "data", "pretrain", "finetune", "report"], set())
    assert full_run.select_stages("data,vocab", None) == (["vocab", "data"], set())
    assert full_run.select_stages(None, "pretrain")[1] == {"pretrain", "finetune", "report"}
    assert full_run.select_stages("vocab,pretrain", "vocab")[1] == {"vocab", "pretrain"}
    with pytest.raises(ValueError, match="unknown or no stage"):
        full_run.select_stages("vocab,tokenize", None)
    with pytest.raises(ValueError, match="not one of the stages to run"):
        full_run.select_stages("report", "pretrain")


def test_plan_predicts_what_runs(tmp_path):
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    assert set(statuses(config).values()) == {"runs: no output yet"}
    for name in ("vocab", "data", "pretrain", "finetune", "report"):
        commit(config, name)
    assert set(statuses(config).values()) == {"up to date: skipped"}

    lr = load_config(TINY, [f"run_dir={tmp_path}", "train.lr=0.001"])
    assert statuses(lr) == {"vocab": "up to date: skipped", "data": "up to date: skipped",
                            "pretrain": "runs: config or inputs changed",
                            "finetune": "runs: config or inputs changed", "report": "runs: config or inputs changed"}
    # data reruns with new masking, so pretrain's input fingerprint changes before pretrain itself runs
    masking = load_config(TINY, [f"run_dir={tmp_path}", "data.masked_lm_prob=0.2"])
    assert [s.startswith("runs") for s in statuses(masking).values()] == [False, True, True, True, True]
    assert statuses(config, force="pretrain") == {
        "vocab": "up to date: skipped", "data": "up to date: skipped", "pretrain": "runs: forced",
        "finetune": "runs: forced", "report": "runs: forced"}
    assert statuses(config, stages="vocab,report") == {
        "vocab": "up to date: skipped", "data": "not selected (has output)", "pretrain": "not selected (has output)",
        "finetune": "not selected (has output)", "report": "up to date: skipped"}


def test_plan_names_missing_inputs(tmp_path):
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    plan = statuses(config, stages="pretrain,report")
    assert plan["pretrain"] == "runs, but needs data output, which is missing and not selected"
    assert plan["report"] == "runs: partial, without data, pretrain, finetune"
    assert plan["vocab"] == "not selected (no output)"


def test_dry_run_prints_inputs_outputs_and_status_without_ray(tmp_path, capsys):
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    commit(config, "vocab")
    assert full_run.main(["--config", TINY, f"run_dir={tmp_path}", "--dry-run", "--force", "data"]) == 0
    text = capsys.readouterr().out
    assert f"DAG for run_dir={tmp_path} (vocab -> data -> pretrain -> finetune -> report):" in text
    assert "  vocab: up to date: skipped\n" in text and "  data: runs: forced\n" in text
    assert f"      in:  vocab: {tmp_path}/vocab\n      in:  config: corpus, vocab, data\n" in text
    assert f"      out: {tmp_path}/pretrain/hf/\n" in text and f"      out: {tmp_path}/report.md\n" in text
    import ray
    assert not ray.is_initialized()


def test_bad_stage_arguments_exit_with_usage(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        full_run.main([f"run_dir={tmp_path}", "--force", "tokenize", "--dry-run"])
    assert e.value.code == 2
    assert "--force 'tokenize': not one of the stages to run" in capsys.readouterr().err
