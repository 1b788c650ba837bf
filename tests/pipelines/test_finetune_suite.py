"""An evaluation suite (finetune.tasks) in one `albert-ray run`: four families and two GLUE tasks by
name (the six families), each searched and exported under finetune/<task>/, one table in report.md, and each task its
own unit of caching: changing one task's settings reruns only that task. The suite's run is the
`family_suite` fixture (tests/pipelines/conftest.py), which the families' own stage tests read too."""

import json
import shutil
import statistics

import pytest
import yaml

from pipelines.cli.run import main
from pipelines.config import load_config, task_configs
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint

TASKS = ["topics", "entities", "endings", "mnli", "stsb", "visits"]


def report_table(report: str) -> list[dict[str, str]]:
    """The rows of report.md's evaluation suite table."""
    section = report.split("## Evaluation suite", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    headers = [h.strip() for h in lines[0].strip("|").split("|")]
    return [dict(zip(headers, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]


@pytest.mark.slow
def test_the_suite_exports_every_task_and_reports_one_table(family_suite):
    config_file, run_dir = family_suite
    config = load_config(str(config_file))
    assert is_up_to_date(config, "finetune")
    manifest = json.loads((run_dir / "finetune" / "manifest.json").read_text())
    assert sorted(manifest["tasks"]) == sorted(TASKS)
    rows = report_table((run_dir / "report" / "report.md").read_text())
    assert [r["task"] for r in rows] == TASKS
    families = [
        "multi_label",
        "token_classification",
        "multiple_choice",
        "classification",
        "regression",
        "question_answering",
    ]
    assert [r["family"] for r in rows] == families
    for row, name in zip(rows, TASKS):
        best = json.loads((run_dir / "finetune" / name / "best.json").read_text())
        # the cell holds 4 significant digits (report/markdown.fmt): SQuAD's and conlleval's F1 are percents
        shown = pytest.approx(best["value"], rel=5e-4, abs=5e-4)
        assert row["metric"] == best["metric"] and float(row["best"]) == shown
        assert (run_dir / "finetune" / name / "best" / "config.json").exists()
        task = json.loads((run_dir / "finetune" / name / "task.json").read_text())
        assert task["fingerprint"] == stage_fingerprint(task_configs(config)[name], "finetune")
    # GLUE's MNLI by name: its files and columns, scored on matched, and on mismatched after the search
    mnli = json.loads((run_dir / "finetune" / "mnli" / "best.json").read_text())
    assert mnli["metric"] == "accuracy" and mnli["label_names"] == ["contradiction", "entailment", "neutral"]
    mismatched = mnli["extra_evals"]["mismatched"]["accuracy"]
    assert rows[3]["also"] == f"mismatched accuracy {mismatched:.4f}"
    source = json.loads((run_dir / "finetune" / "mnli" / "task.json").read_text())["examples"]["inputs"][0]
    assert source["source"].endswith("MNLI/train.tsv") and source["usable"] == 3


@pytest.mark.slow
def test_a_further_eval_file_is_scored_with_the_best_model(family_suite):
    """finetune.extra_eval_paths: the metric reported for the file equals the one recomputed from
    the predictions written for it."""
    from sklearn.metrics import f1_score

    config_file, run_dir = family_suite
    out = run_dir / "finetune" / "topics"
    best = json.loads((out / "best.json").read_text())
    predicted = {
        p["id"]: p["prediction"]
        for p in map(json.loads, (out / "extra_evals" / "more" / "predictions.jsonl").read_text().splitlines())
    }
    more = (config_file.parent / "topics_more.csv").read_text().splitlines()[1:]
    gold = [line.split(",")[1].split(";") for line in more]
    hot = lambda labels: [int(n in labels) for n in best["label_names"]]  # noqa: E731
    expected = f1_score([hot(g) for g in gold], [hot(predicted[i]) for i in range(len(gold))], average="micro")
    assert best["extra_evals"]["more"]["micro_f1"] == pytest.approx(expected)


@pytest.mark.slow
def test_repeats_and_the_random_arm_are_reported_beside_the_best(family_suite):
    _, run_dir = family_suite
    best = json.loads((run_dir / "finetune" / "entities" / "best.json").read_text())
    runs = best["repeats"]["runs"]
    assert [r["seed"] for r in runs] == [42, 43]  # the best trial's, then finetune.seed + 1
    assert runs[0] == {"seed": 42, "value": best["value"], "trial_id": best["trial_id"]}
    assert len({r["trial_id"] for r in runs}) == 2
    values = [r["value"] for r in runs]
    assert best["repeats"]["mean"] == pytest.approx(statistics.fmean(values))
    assert best["repeats"]["std"] == pytest.approx(statistics.stdev(values))
    rows = report_table((run_dir / "report" / "report.md").read_text())
    assert rows[1]["mean ± std over seeds"] == (
        f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f} (2 seeds)"
    )
    out = run_dir / "finetune" / "endings"
    random = json.loads((out / "random" / "best.json").read_text())
    assert random["finetune"]["init"] == "random" and (out / "random" / "best" / "config.json").exists()
    assert float(rows[2]["no pretraining (init=random)"]) == pytest.approx(random["value"], abs=5e-4)
    assert rows[1]["no pretraining (init=random)"] == "–"  # asked for by the endings task only


@pytest.mark.slow
def test_changing_one_task_reruns_only_that_task(family_suite, tmp_path, capsys):
    config_file, run_dir = family_suite
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    values = yaml.safe_load(config_file.read_text())
    values["run_dir"] = str(copy)
    values["finetune"]["tasks"]["topics"]["tune"]["space"]["finetune.lr"] = 0.002
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(values, sort_keys=False))
    before = {name: json.loads((copy / "finetune" / name / "best.json").read_text()) for name in TASKS}

    assert main(["--config", str(changed), "--stages", "finetune,report", "--dry-run"]) == 0
    assert "redoes topics; carries over entities, endings, mnli, stsb, visits" in capsys.readouterr().out
    assert main(["--config", str(changed), "--stages", "finetune,report"]) == 0
    after = {name: json.loads((copy / "finetune" / name / "best.json").read_text()) for name in TASKS}
    for name in TASKS[1:]:  # carried over: the same trials, the same model
        assert after[name] == before[name]
        assert (copy / "finetune" / name / "best" / "model.safetensors").read_bytes() == (
            run_dir / "finetune" / name / "best" / "model.safetensors"
        ).read_bytes()
    assert after["topics"]["trial_id"] != before["topics"]["trial_id"]
    assert after["topics"]["finetune"]["lr"] == 0.002
    assert is_up_to_date(load_config(str(changed)), "finetune")
