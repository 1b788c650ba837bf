"""The distill stage through the DAG: `albert-ray run --stages finetune,distill` with distill.layers
set fine-tunes a 4-layer teacher on the embedded BBC task, then searches a half-depth student of it
with Ray Tune and exports it under distill/best/: a standard ALBERT of 2 layers that transformers
loads, beside best.json (the student's metrics and the teacher's on the same eval rows) and
tradeoff.json (teacher, student and early exit scored and timed on those rows), which the report
shows as a table and a figure. And `albert-ray distill` of the evaluation suite's named-entity,
question-answering and multiple-choice models (distill.teacher, with their tasks' finetune keys):
students that transformers loads as its token-classification, QA and multiple-choice heads and
that give predict's tags, answer texts and choices, which the stage's own predictions file gives
too."""

import csv
import json
from pathlib import Path

import pytest
import yaml

from pipelines.config import load_config
from pipelines.inference.predictor import Predictor
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint

from .family_paths import CUT, TASKS, eval_rows, finetune_predictions, transformers_predictions

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


ANSWER = {"token_classification": "tags", "question_answering": "answer", "multiple_choice": "prediction"}
METRIC = {"token_classification": "f1", "question_answering": "f1", "multiple_choice": "accuracy"}


@pytest.mark.parametrize("family", list(ANSWER))
def test_a_suites_ner_qa_and_choice_models_distil_into_students_that_answer_as_predict(family, family_suite, tmp_path):
    from pipelines.cli.command import main

    config_file, run_dir = family_suite
    task = yaml.safe_load(config_file.read_text())["finetune"]["tasks"][TASKS[family]]
    teacher = run_dir / "finetune" / TASKS[family] / "best"
    overrides = [
        f"run_dir={tmp_path}/run",
        f"distill.teacher={teacher}",
        "distill.layers=half",
        "distill.hidden_weight=0.5",  # the states matched at every position's head too
        *(f"finetune.{key}={value}" for key, value in task["finetune"].items()),
        "tune.num_samples=1",
        "tune.scheduler=none",
        "tune.space={finetune.lr: 0.001, finetune.batch_size: 16, finetune.epochs: 2}",
    ]
    assert main(["distill", *overrides]) == 0
    out = tmp_path / "run" / "distill"
    best = json.loads((out / "best.json").read_text())
    finetuned = json.loads((teacher.parent / "best.json").read_text())
    metric = METRIC[family]
    assert (best["student_layers"], best["teacher"]["num_hidden_layers"], best["metric"]) == (2, 4, metric)
    assert best["teacher"]["metrics"][metric] == pytest.approx(finetuned["metrics"][metric])  # the same eval rows
    assert 0 <= best["metrics"][metric] <= 100
    # early exit is the sequence families': the trade-off is the teacher and the student
    tradeoff = json.loads((out / "tradeoff.json").read_text())
    assert [arm["name"] for arm in tradeoff["arms"]] == ["teacher", "student"]
    assert tradeoff["arms"][1]["metrics"][metric] == pytest.approx(best["metrics"][metric])

    student = out / "best"
    config = json.loads((student / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["albert_ray"]["task"] == family
    rows = eval_rows(family, config_file.parent)
    predicted = Predictor.load(str(student), device="cpu").predict(rows)
    key = ANSWER[family]
    # the stage's predictions file (its evaluation) and plain transformers give predict's answers
    searched = finetune_predictions(family, out)
    assert [searched[row["id"]] for row in rows] == [p[key] for p in predicted]
    plain = transformers_predictions(family, student, rows)
    assert [a[key] for a in plain if a != CUT] == [p[key] for p, a in zip(predicted, plain) if a != CUT]
    assert sum(a != CUT for a in plain) > len(rows) / 2
