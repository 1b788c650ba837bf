"""The distill stage through the DAG: `albert-ray run --stages finetune,distill` with distill.layers
set fine-tunes a 4-layer teacher on the embedded BBC task, then searches a half-depth student of it
with Ray Tune and exports it under distill/best/: a standard ALBERT of 2 layers that transformers
loads, beside best.json (the student's metrics and the teacher's on the same eval rows) and
tradeoff.json (teacher, student and early exit scored and timed on those rows), which the report
shows as a table and a figure."""

import csv
import json
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint

pytestmark = pytest.mark.e2e


def test_the_dag_distils_the_fine_tuned_model_into_a_half_depth_student(ray_session, tiny_pretrained, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from pipelines.cli.run import main

    overrides = [
        f"run_dir={tmp_path}/run",
        f"finetune.pretrained={tiny_pretrained}",
        "finetune.max_seq_length=32",
        "finetune.max_train_examples=200",
        "finetune.max_eval_examples=100",
        "tune.num_samples=1",
        "tune.space={finetune.lr: 0.001, finetune.batch_size: 16, finetune.epochs: 2}",
        "distill.layers=half",
    ]
    assert main(["--stages", "finetune,distill,report", *overrides]) == 0
    out = tmp_path / "run" / "distill"
    best = json.loads((out / "best.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    finetuned = json.loads((tmp_path / "run" / "finetune" / "best.json").read_text())
    assert best["student_layers"] == 2 and best["teacher"]["num_hidden_layers"] == 4
    # the teacher scored on the same eval rows as the student: finetune's own figure for it
    assert best["teacher"]["metrics"]["accuracy"] == pytest.approx(finetuned["metrics"]["accuracy"])
    assert 0 <= best["metrics"]["accuracy"] <= 1 and best["metric"] == "accuracy"
    trials = list(csv.DictReader((out / "trials.csv").read_text().splitlines()))
    assert len(trials) == 1 and trials[0]["status"] == "completed"
    assert (out / "predictions.jsonl").exists()
    model = AutoModelForSequenceClassification.from_pretrained(out / "best")
    assert model.config.num_hidden_layers == 2 and model.config.albert_ray["task"] == "classification"
    config = load_config(overrides=overrides)
    assert manifest["fingerprint"] == stage_fingerprint(config, "distill") and is_up_to_date(config, "distill")
    assert manifest["student_layers"] == 2
    changed = load_config(overrides=[*overrides, "distill.temperature=4.0"])
    assert stage_fingerprint(changed, "distill") != manifest["fingerprint"]
    assert not Path(tmp_path / "run" / "predict").exists()

    # the trade-off: each arm scored on the eval rows best.json's figures come from
    tradeoff = json.loads((out / "tradeoff.json").read_text())
    assert tradeoff == manifest["tradeoff"] and tradeoff["eval_rows"] == 100
    arms = {arm["name"]: arm for arm in tradeoff["arms"]}
    assert list(arms) == ["teacher", "student", "exit, patience 1", "exit, patience 2", "exit, entropy < 0.2"]
    assert arms["teacher"]["metrics"]["accuracy"] == pytest.approx(best["teacher"]["metrics"]["accuracy"])
    assert arms["student"]["metrics"]["accuracy"] == pytest.approx(best["metrics"]["accuracy"])
    assert (arms["teacher"]["layers"], arms["student"]["mean_depth"]) == (4, 2)
    assert all(1 <= arm["mean_depth"] <= 4 and arm["rows_per_s"] > 0 for arm in arms.values())
    report = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "| student | 2 | 2 |" in report and "![accuracy against rows per second](depth_tradeoff.png)" in report
    assert (tmp_path / "run" / "report" / "depth_tradeoff.png").read_bytes()[:4] == b"\x89PNG"
