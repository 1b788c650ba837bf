"""The fine-tuning stage: a Ray Tune search with ASHA on the embedded BBC task, the exported best
model in transformers, its trials tracked in TensorBoard and MLflow, and the stage's fingerprint. A
trial that is a two-worker Ray Train (DDP) job, on s3://: the job test (test_full_run.py)."""

import csv
import dataclasses
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.config import TrackingSection, load_config
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families._sequence.task import load_task
from pipelines.report.markdown import fmt
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint

from .tracking.reading import mlflow_artifact, mlflow_artifact_names, mlflow_history, mlflow_runs, tensorboard_scalars


def test_a_given_pretrained_directory_is_fingerprinted_without_a_pretrain_manifest(tiny_pretrained, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_pretrained, model)
    config = load_config(overrides=[f"run_dir={tmp_path}/run", f"finetune.pretrained={model}"])
    first = stage_fingerprint(config, "finetune")
    assert stage_fingerprint(config, "finetune") == first
    with open(model / "model.safetensors", "ab") as f:
        f.write(b"\0")
    assert stage_fingerprint(config, "finetune") != first
    with pytest.raises(FileNotFoundError, match="none does not exist"):
        stage_fingerprint(load_config(overrides=[f"finetune.pretrained={tmp_path}/none"]), "finetune")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        stage_fingerprint(load_config(overrides=[f"finetune.pretrained={tmp_path}/empty"]), "finetune")
    with pytest.raises(FileNotFoundError, match="run the pretrain stage first"):
        stage_fingerprint(load_config(overrides=[f"run_dir={tmp_path}/run"]), "finetune")
    # a table is fingerprinted by its content, not its name
    (tmp_path / "train.csv").write_text("text,label\na,x\n")
    with_table = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            f"finetune.pretrained={model}",
            f"finetune.train_path={tmp_path}/train.csv",
        ]
    )
    before = stage_fingerprint(with_table, "finetune")
    (tmp_path / "train.csv").write_text("text,label\nb,y\n")
    assert stage_fingerprint(with_table, "finetune") != before


def transformers_metric(best_dir, config, max_length):
    from transformers import AlbertForSequenceClassification, AlbertTokenizer

    model = AlbertForSequenceClassification.from_pretrained(best_dir).eval()
    tokenizer = AlbertTokenizer.from_pretrained(best_dir)
    task = load_task(config.finetune, task_family(config.finetune.task))
    assert [model.config.id2label[i] for i in range(len(task.label_names))] == task.label_names
    predictions = []
    with torch.no_grad():
        for i in range(0, len(task.eval), 64):
            batch = tokenizer(
                task.eval.texts[i : i + 64],
                truncation=True,
                max_length=max_length,
                padding=True,
                return_tensors="pt",
                return_token_type_ids=True,
            )
            predictions.append(model(**batch).logits.argmax(-1).numpy())
    return float((np.concatenate(predictions) == np.array(task.eval_targets)).mean())


def check_what_the_report_says(config, best, trials, predictions, labels):
    """Issue #45: best.json holds the best trial's own hyperparameters and curve and the majority-class
    baseline on the same eval examples; the report shows them, with per-class scores and the confusion
    matrix counted from predictions.jsonl (here held to scikit-learn's on the same lines)."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    from pipelines.stages.report import run_report

    assert all(p["label"] == labels[p["id"]] for p in predictions)  # each line carries its gold class
    row = next(t for t in trials if t["trial_id"] == best["trial_id"])
    assert best["searched"] == {
        "finetune.lr": float(row["finetune.lr"]),
        "finetune.batch_size": 8,
        "finetune.epochs": 3,
    }
    assert best["finetune"]["lr"] == float(row["finetune.lr"])
    assert [e["epoch"] for e in best["epochs"]] == list(range(1, int(row["epochs_run"]) + 1))
    assert best["epochs"][best["epoch"] - 1]["accuracy"] == best["value"]
    majority = best["baseline"]["predictor"].split("'")[1]
    assert best["baseline"]["predictor"].startswith(f"majority class '{majority}' (")
    assert best["baseline"]["metrics"]["accuracy"] == sum(p["label"] == majority for p in predictions) / 200

    untracked = dataclasses.replace(config, tracking=TrackingSection())  # the search's MLflow runs are checked after
    report = Path(run_report(untracked), "report.md").read_text()
    names = best["label_names"]
    gold, predicted = [p["label"] for p in predictions], [p["prediction"] for p in predictions]
    precision, recall, f1, support = precision_recall_fscore_support(gold, predicted, labels=names, zero_division=0)
    for i, name in enumerate(names):
        assert f"| {name} | {fmt(precision[i])} | {fmt(recall[i])} | {fmt(f1[i])} | {support[i]} |" in report
    for name, counts in zip(names, confusion_matrix(gold, predicted, labels=names)):
        assert f"| {name} | " + " | ".join(str(c) for c in counts) + " |" in report
    assert f"| trivial: {best['baseline']['predictor']} | {fmt(best['baseline']['metrics']['accuracy'])} |" in report
    assert f"| finetune.lr | {fmt(best['searched']['finetune.lr'])} |" in report
    for epoch in best["epochs"]:
        assert f"| {epoch['epoch']} | {fmt(epoch['accuracy'])} |" in report
    assert "finetune.doc_stride" not in report.split("## Configuration")[0]  # a question answering key
    assert "![Confusion matrix](confusion_matrix.png)" in report and "finetune_curve.png" in report


@pytest.mark.e2e  # a 4-trial ASHA search, ~23 s: make test-e2e (issue #45: make test within 12 minutes)
def test_asha_search_on_bbc_exports_a_best_model_transformers_reproduces(
    ray_session, tiny_pretrained, tmp_path, capsys, mlflow_server
):
    from pipelines.stages.finetune import run_finetune

    overrides = [
        f"run_dir={tmp_path}",
        f"finetune.pretrained={tiny_pretrained}",
        "finetune.max_seq_length=32",
        "finetune.max_train_examples=400",
        "finetune.max_eval_examples=200",
        "tune.num_samples=4",
        "tune.max_concurrent_trials=2",
        "tune.reduction_factor=2",
        "tune.grace_period=1",
        "tune.space={finetune.lr: [0.00001, 0.001], finetune.batch_size: [8], finetune.epochs: 3}",
        "tracking.tensorboard=true",
        f"tracking.mlflow_uri={mlflow_server}",
        "tracking.mlflow_experiment=asha",
    ]
    config = load_config(overrides=overrides)
    out = run_finetune(config)
    assert sorted(os.listdir(out)) == [
        ".albert-ray.json",
        "best",
        "best.json",
        "config.yaml",
        "manifest.json",
        "predictions.jsonl",
        "tensorboard",
        "tracking.json",
        "trials.csv",
    ]
    trials = list(csv.DictReader(Path(out, "trials.csv").read_text().splitlines()))
    assert len(trials) == 4 and {t["finetune.lr"] for t in trials} <= {"1e-05", "0.001"}
    assert all(t["status"] in ("completed", "stopped_early") for t in trials)
    stopped = [t for t in trials if t["stopped_early"] == "True"]
    assert stopped and all(int(t["epochs_run"]) < 3 for t in stopped)

    best = json.loads(Path(out, "best.json").read_text())
    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert best["value"] == max(float(t["accuracy"]) for t in trials)
    assert manifest["trials"] == {"total": 4, "completed": 4 - len(stopped), "stopped_early": len(stopped), "failed": 0}
    assert manifest["fingerprint"] == stage_fingerprint(config, "finetune") and is_up_to_date(config, "finetune")
    examples = manifest["examples"]
    assert (
        examples["inputs"][0]["read"]
        == 2225
        == (
            examples["train"]["used"]
            + examples["train"]["unsampled"]
            + examples["eval"]["used"]
            + examples["eval"]["unsampled"]
        )
    )
    # the reported accuracy, recomputed from predictions.jsonl: each line's id is the article's row
    from pipelines.finetuning.tables import bbc_news_examples

    bbc = bbc_news_examples()
    labels = dict(zip(bbc.rows, bbc.labels))
    predictions = [json.loads(x) for x in Path(out, "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == examples["eval"]["used"] == 200
    assert best["value"] == sum(p["prediction"] == labels[p["id"]] for p in predictions) / 200
    check_what_the_report_says(config, best, trials, predictions, labels)
    summary = capsys.readouterr().out
    assert "fine-tuning: 4 trials" in summary and f"best: trial {best['trial_id']}" in summary

    assert sorted(os.listdir(f"{out}/best")) == [
        "config.json",
        "model.safetensors",
        "spiece.model",
        "tokenizer_config.json",
    ]
    assert abs(transformers_metric(f"{out}/best", config, 32) - best["value"]) <= 0.005

    check_tracked_search(mlflow_server, out, trials, best)

    assert run_finetune(config) == out  # up to date: nothing to do
    assert "up to date" in capsys.readouterr().out


def check_tracked_search(mlflow_server, out, trials, best):
    """Issue #31: a run for the search (the finetune and tune sections as params, the best model as
    artifacts) with a child run per trial (its hyperparameters as params, its metrics by epoch, equal
    to trials.csv at its best epoch), and each trial's event files, read back with TensorBoard's reader."""
    runs = mlflow_runs(mlflow_server, "asha")
    search = runs.pop("finetune")
    assert search.info.status == "FINISHED" and search.data.params["tune.num_samples"] == "4"
    assert search.data.metrics["best/accuracy"] == best["value"]
    assert mlflow_artifact_names(mlflow_server, search.info.run_id, "best") == sorted(os.listdir(f"{out}/best"))
    weights = mlflow_artifact(mlflow_server, search.info.run_id, "best/model.safetensors")
    assert weights == Path(out, "best", "model.safetensors").read_bytes()
    assert sorted(runs) == sorted(f"trial {t['trial_id']}" for t in trials)
    assert sorted(os.listdir(f"{out}/tensorboard")) == sorted(t["trial_id"] for t in trials)
    for t in trials:
        run = runs[f"trial {t['trial_id']}"]
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == search.info.run_id
        assert run.data.params == {"finetune.lr": t["finetune.lr"], "finetune.batch_size": "8", "finetune.epochs": "3"}
        accuracy = mlflow_history(mlflow_server, run.info.run_id, "accuracy")
        assert sorted(accuracy) == list(range(1, int(t["epochs_run"]) + 1))
        assert accuracy[int(t["best_epoch"])] == float(t["accuracy"])
        events = tensorboard_scalars(Path(out, "tensorboard", t["trial_id"]), "accuracy")
        assert events == [(epoch, pytest.approx(value)) for epoch, value in sorted(accuracy.items())]
        assert set(mlflow_history(mlflow_server, run.info.run_id, "train_loss")) == set(accuracy)
