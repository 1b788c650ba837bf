"""The predict stage (albert-ray predict) through Ray Data, on the shared suite's exports
(`family_suite`): a prediction per usable row under its own id, the rejected rows counted by
reason, probabilities equal to transformers' for the same model, and the fine-tuning stage's
metrics recomputed on the same rows; csv, jsonl and parquet files, in a folder and on S3; a
multiple-choice model's predictions equal to its fine-tuning's; an input no read task could read
one line before Ray starts. Without Ray: a family's own files read by it as stored, and rows only
encoding finds unusable rejected with its reason."""

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers

from pipelines.config import load_config
from pipelines.errors import BadInput

from .family_tasks import GLUE, swag_rows


def predictions(out) -> dict[str, dict]:
    table = pq.read_table(out / "predictions")
    return {row["id"]: row for row in table.to_pylist()}


@pytest.mark.slow
def test_a_pair_classifier_predicts_as_transformers_and_scores_as_its_search(family_suite, tmp_path):
    from pipelines.stages.predict import run_predict

    _, run_dir = family_suite
    model = run_dir / "finetune" / "mnli" / "best"
    rows = (GLUE / "MNLI" / "dev_matched.tsv").read_text().splitlines()
    header = rows[0].split("\t")

    def row(premise: str, hypothesis: str) -> str:
        cells = ["x"] * len(header)
        cells[header.index("sentence1")], cells[header.index("sentence2")] = premise, hypothesis
        cells[header.index("gold_label")] = "neutral"
        return "\t".join(cells)

    # the dev set, then a row without a premise and one with a blank hypothesis
    (tmp_path / "dev.tsv").write_text("\n".join([*rows, row("", "A hypothesis."), row("A premise.", " ")]) + "\n")
    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            f"predict.model={model}",
            f"predict.input={tmp_path}/dev.tsv",
            "predict.text_column=sentence1",
            "predict.text_pair_column=sentence2",
            "predict.label_column=gold_label",
            "predict.workers=1",
        ]
    )
    out = Path(run_predict(config))
    manifest = json.loads((out / "manifest.json").read_text())
    dev = [line.split("\t") for line in rows[1:]]
    assert manifest["rows"] == {
        "read": len(dev) + 2,
        "predicted": len(dev),
        "rejected": {"empty_text": 1, "empty_text_pair": 1},
    }
    assert manifest["kind"] == "classification" and manifest["label_names"] == [
        "contradiction",
        "entailment",
        "neutral",
    ]
    got = predictions(out)
    assert sorted(got) == [str(i) for i in range(len(dev) + 2)]  # every row under its place
    assert got[str(len(dev))]["rejected"] == "empty_text" and got[str(len(dev))]["prediction"] is None

    # transformers' model and tokenizer on the same rows cut at 32: the same probabilities and classes
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    tokenizer = transformers.AlbertTokenizer.from_pretrained(model)
    premises = [r[header.index("sentence1")] for r in dev]
    hypotheses = [r[header.index("sentence2")] for r in dev]
    batch = tokenizer(
        premises,
        hypotheses,
        truncation=True,
        max_length=32,
        padding=True,
        return_tensors="pt",
        return_token_type_ids=True,
    )
    with torch.no_grad():
        expected = torch.softmax(theirs(**batch).logits, -1).numpy()
    ours = np.array([got[str(i)]["probabilities"] for i in range(len(dev))])
    # no predict.max_seq_length: the length the model was fine-tuned at, 32, on a dev pair longer than
    # that (issue #44: predict and serve applied a model at different lengths; serve: test_serve.py)
    assert max(len(ids) for ids in tokenizer(premises, hypotheses)["input_ids"]) > 32
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    assert manifest["max_seq_length"] == 32
    names = manifest["label_names"]
    assert [got[str(i)]["prediction"] for i in range(len(dev))] == [names[i] for i in expected.argmax(1)]

    # the search's metrics on the same rows (its eval set is this dev set)
    best = json.loads((model.parent / "best.json").read_text())
    for name in ("accuracy", "macro_f1", "mcc", "eval_loss"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name], abs=1e-5), name
    assert manifest["metrics"]["rows"] == len(dev)


def eval_rows(config_file) -> list[tuple[str, list[str]]]:
    """The multi-label task's eval rows: (text, topics)."""
    lines = (config_file.parent / "topics_eval.csv").read_text().splitlines()[1:]
    return [(text, topics.split(";")) for text, topics in (line.split(",") for line in lines)]


@pytest.mark.slow
def test_a_multi_label_model_over_a_folder_of_tables(family_suite, tmp_path, capsys):
    """Ids are `file:row` in a folder; the predictions equal the search's own predictions file on
    the same rows, from csv and from parquet (files Ray Data once could not read: issue #43), and
    every row that cannot be predicted is counted with its reason; a job's `_SUCCESS` marker is
    skipped (a file without a column: tests/pipelines/inference/test_table_files.py)."""
    from pipelines.stages.predict import run_predict

    config_file, run_dir = family_suite
    model = run_dir / "finetune" / "topics" / "best"
    folder = tmp_path / "tables"
    (folder / "parts").mkdir(parents=True)
    eval_csv = (config_file.parent / "topics_eval.csv").read_text()
    (folder / "a.csv").write_text(eval_csv)
    jsonl = [
        {"text": "goal match today"},
        {"topics": "x"},
        {},
        {"text": None},
        {"text": 5},
        {"text": ["goal"]},
        {"text": {"a": 1}},
        {"text": True},
    ]
    (folder / "b.jsonl").write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in jsonl) + b"{not json\n[1]\n")
    # gzipped: not UTF-8, a field too many, one too few, then a row whose label is no class (counted,
    # not scored)
    c = b"text,topics\ncaf\xe9 goal,sport\nx,sport,extra\nlonely\ngoal match,nonsuch\n"
    (folder / "c.csv.gz").write_bytes(gzip.compress(c))
    texts = [text for text, _ in eval_rows(config_file)]
    for name, part in (("d.parquet", texts[:12]), ("e.parquet", texts[12:])):  # in row groups of 5
        table = pa.table({"text": part, "topics": pa.nulls(len(part), pa.list_(pa.string())), "n": range(len(part))})
        pq.write_table(table, folder / "parts" / name, row_group_size=5)
    (folder / "parts" / "_SUCCESS").write_bytes(b"")
    overrides = [
        f"run_dir={tmp_path}/run",
        f"predict.model={model}",
        f"predict.input={folder}",
        "predict.label_column=topics",
        "predict.label_delimiter=;",
        "predict.max_seq_length=16",
        "predict.workers=1",
    ]
    out = Path(run_predict(load_config(overrides=overrides)))
    manifest = json.loads((out / "manifest.json").read_text())
    rejected = {"missing_text": 3, "not_a_string": 4, "bad_row": 4, "not_utf8": 1}
    assert manifest["rows"] == {"read": 54, "predicted": 42, "rejected": rejected}
    (summary, scored) = [x for x in capsys.readouterr().out.splitlines() if "rows predicted" in x or "rows scored" in x]
    assert scored.startswith("predict: 20 of 42 rows scored against predict.label_column=topics (1 label_not_a_class,")
    assert summary.startswith("predict: 42 of 54 rows predicted, 12 rejected (") and all(
        f"'{reason}': {n}" in summary for reason, n in rejected.items()
    )
    assert summary.endswith("; skipped, not tables: parts/_SUCCESS")
    assert manifest["files"] == {"read": 5, "own_format": 0, "skipped": 1, "skipped_examples": ["parts/_SUCCESS"]}
    got = predictions(out)
    ids = [f"a.csv:{i}" for i in range(20)] + [f"b.jsonl:{i}" for i in range(10)] + [f"c.csv.gz:{i}" for i in range(4)]
    ids += [f"parts/d.parquet:{i}" for i in range(12)] + [f"parts/e.parquet:{i}" for i in range(8)]
    assert sorted(got) == sorted(ids)
    reasons = [got[f"b.jsonl:{i}"]["rejected"] for i in range(10)] + [
        got[f"c.csv.gz:{i}"]["rejected"] for i in range(4)
    ]
    assert reasons == [None, "missing_text", "missing_text", "missing_text"] + ["not_a_string"] * 4 + [
        "bad_row",
        "bad_row",
        "not_utf8",
        "bad_row",
        "bad_row",
        None,
    ]
    assert f"{folder} c.csv.gz:0: not_utf8" in manifest["rejection_examples"]
    searched = {
        p["id"]: p["prediction"] for p in map(json.loads, (model.parent / "predictions.jsonl").read_text().splitlines())
    }
    assert {i: got[f"a.csv:{i}"]["prediction"] for i in range(20)} == searched
    from_parquet = [got[f"parts/d.parquet:{i}"] for i in range(12)] + [got[f"parts/e.parquet:{i}"] for i in range(8)]
    assert [row["prediction"] for row in from_parquet] == [searched[i] for i in range(20)]
    np.testing.assert_allclose(
        [row["probabilities"] for row in from_parquet], [got[f"a.csv:{i}"]["probabilities"] for i in range(20)]
    )
    best = json.loads((model.parent / "best.json").read_text())
    # b.jsonl's labelled row has no text, its other row no label; c.csv.gz's label is no class
    assert manifest["metrics"]["rows"] == 20 and manifest["metrics"]["label_not_a_class"] == 1
    for name in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name]), name

    # issue #45: the same small input without predict.workers is predicted in the command's own
    # process, which never imports Ray, and gives the same rows and manifest
    script = (
        "import sys; from pipelines.cli import stage_main; "
        "status = stage_main('predict', 'predict', sys.argv[1:]); print('ray imported:', 'ray' in sys.modules); "
        "sys.exit(status)"
    )
    here = [f"run_dir={tmp_path}/here", *[o for o in overrides[1:] if not o.startswith("predict.workers")]]
    process = subprocess.run([sys.executable, "-c", script, *here], capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert "without Ray (predict.in_process_bytes=4,194,304)" in process.stdout
    assert process.stdout.splitlines()[-1] == "ray imported: False"
    out_here = tmp_path / "here" / "predict"
    here_rows = predictions(out_here)
    # the same rows, predictions and reasons; probabilities to float rounding (1 thread there, 2 here)
    assert {i: {**r, "probabilities": None} for i, r in here_rows.items()} == {
        i: {**r, "probabilities": None} for i, r in got.items()
    }
    for i, row in got.items():
        np.testing.assert_allclose(here_rows[i]["probabilities"] or [], row["probabilities"] or [], rtol=1e-6)
    manifest_here = json.loads((out_here / "manifest.json").read_text())
    assert manifest_here["workers"] == 0 and manifest["workers"] == 1
    same = ("rows", "rejection_examples", "files", "metrics", "columns", "kind", "label_names", "max_seq_length")
    assert {k: manifest_here[k] for k in same} == {k: manifest[k] for k in same}


@pytest.mark.slow
def test_a_parquet_file_on_s3(family_suite, s3_endpoint, tmp_path):
    """Issue #43: parquet failed on Ray Data's non-seekable stream; read from S3 by row group, a
    list label per row, the search's predictions and metrics on the same rows."""
    from pipelines.stages.predict import run_predict
    from pipelines.storage import arrow_filesystem, filesystem

    config_file, run_dir = family_suite
    model = run_dir / "finetune" / "topics" / "best"
    filesystem("s3://predict-input/x")[0].mkdir("predict-input")
    fs, key = arrow_filesystem("s3://predict-input/eval/topics.parquet")
    rows = eval_rows(config_file)
    table = pa.table({"text": [t for t, _ in rows], "topics": [c for _, c in rows], "body": ["x"] * len(rows)})
    pq.write_table(table, key, filesystem=fs, row_group_size=8)
    overrides = [
        f"run_dir={tmp_path}/run",
        f"predict.model={model}",
        "predict.input=s3://predict-input/eval/topics.parquet",
        "predict.label_column=topics",
        "predict.max_seq_length=16",
        "predict.workers=1",
    ]
    out = Path(run_predict(load_config(overrides=overrides)))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rows"] == {"read": 20, "predicted": 20, "rejected": {}}
    got = predictions(out)
    searched = {
        p["id"]: p["prediction"] for p in map(json.loads, (model.parent / "predictions.jsonl").read_text().splitlines())
    }
    assert {i: got[str(i)]["prediction"] for i in range(20)} == searched
    best = json.loads((model.parent / "best.json").read_text())
    assert manifest["metrics"]["rows"] == 20
    for name in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name]), name


@pytest.mark.slow
def test_a_multiple_choice_model_predicts_as_its_fine_tuning_and_scores_as_its_search(family_suite, tmp_path):
    """Rows of a question, a context and a list of choices (jsonl): the index of the right choice as
    predictions.jsonl says it, the probabilities over the row's choices, accuracy and eval_loss as
    the search's on the same questions; rows the family cannot predict counted with its reasons."""
    from pipelines.stages.predict import run_predict

    config_file, run_dir = family_suite
    model = run_dir / "finetune" / "endings" / "best"
    rows = swag_rows(config_file.parent / "swag_val.csv")
    bad = [{"id": "few", "question": "The dog", "choices": ["barks."]}, {"id": "text", "choices": "barks. moos."}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rows, *bad]))
    overrides = [
        f"run_dir={tmp_path}/run",
        f"predict.model={model}",
        f"predict.input={tmp_path}/rows.jsonl",
        "predict.id_column=id",
        "predict.label_column=label",
        "predict.workers=1",
    ]
    out = Path(run_predict(load_config(overrides=overrides)))
    manifest = json.loads((out / "manifest.json").read_text())
    rejected = {"too_few_choices": 1, "not_a_list_of_strings": 1}
    assert manifest["rows"] == {"read": len(rows) + 2, "predicted": len(rows), "rejected": rejected}
    assert (manifest["kind"], manifest["max_seq_length"]) == ("multiple_choice", 24)
    assert manifest["columns"] == {
        "question": "question",
        "context": "context",
        "choices": "choices",
        "id": "id",
        "label": "label",
    }
    got = predictions(out)
    assert pq.read_table(out / "predictions").schema.names == ["id", "prediction", "probabilities", "label", "rejected"]
    searched = {
        p["id"]: p["prediction"] for p in map(json.loads, (model.parent / "predictions.jsonl").read_text().splitlines())
    }
    assert {r["id"]: got[r["id"]]["prediction"] for r in rows} == searched
    for r in rows:
        probabilities = got[r["id"]]["probabilities"]
        assert len(probabilities) == 4 and int(np.argmax(probabilities)) == searched[r["id"]]
    assert (got["few"]["rejected"], got["few"]["prediction"]) == ("too_few_choices", None)
    best = json.loads((model.parent / "best.json").read_text())
    assert manifest["metrics"]["rows"] == len(rows) and manifest["metrics"]["label_not_a_choice"] == 0
    for name in ("accuracy", "eval_loss"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name], abs=1e-5), name


def test_an_export_predict_does_not_serve_is_refused_by_name(tiny_pretrained, tmp_path):
    from pipelines.stages.predict import run_predict

    (tmp_path / "rows.csv").write_text("text\nhello\n")
    config = load_config(
        overrides=[f"run_dir={tmp_path}/run", f"predict.model={tiny_pretrained}", f"predict.input={tmp_path}/rows.csv"]
    )
    with pytest.raises(BadInput, match="an export of AlbertForPreTraining; predict serves the task families'"):
        run_predict(config)
    assert not (tmp_path / "run" / "predict").exists()


def test_an_input_no_read_task_could_read_is_one_line_before_ray_starts(family_suite, tmp_path, capsys, monkeypatch):
    """Issue #43: a missing column was one line after ~170 lines of Ray's tracebacks, a parquet file
    Ray Data's traceback, an empty folder Ray's own. The real command in a process of its own, and
    the others in this one: one line, exit status 2, no traceback, nothing written."""
    from pipelines.cli import stage_main

    _, run_dir = family_suite
    model = run_dir / "finetune" / "topics" / "best"
    (tmp_path / "rows.csv").write_text("text,topics\nhello,sport\n")
    command = [str(Path(sys.executable).parent / "albert-ray"), "predict", "run_dir=run", f"predict.model={model}"]
    process = subprocess.run(
        [*command, "predict.input=rows.csv", "predict.text_column=body"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 2 and "Traceback" not in process.stdout + process.stderr, process.stderr
    assert process.stderr.splitlines() == [
        "albert-ray predict: error: rows.csv: no column 'body' (predict.text_column); its columns are text, topics"
    ]
    assert not (tmp_path / "run" / "predict").exists()

    (tmp_path / "parts").mkdir()
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "parts" / "a.parquet")
    (tmp_path / "parts" / "_SUCCESS").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    cases = [
        (
            ["predict.input=parts", "predict.label_column=topics"],
            "parts/a.parquet: no column 'topics' (predict.label_column); its columns are text",
        ),
        (["predict.input=empty"], "predict.input: empty holds no files"),
        (
            ["predict.input=rows.csv", "predict.max_seq_length=600"],
            f"predict.max_seq_length=600 exceeds {model}'s max_position_embeddings=512",
        ),
    ]
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    for argv, message in cases:
        assert stage_main("predict", "the predict stage", [*command[2:], *argv]) == 2
        captured = capsys.readouterr()
        # less what Ray's log monitor relays from the session's processes, each line led by its name
        ours = [line for line in captured.err.splitlines() if not line.lstrip("\x1b[0123456789m").startswith("(")]
        assert ours == [f"albert-ray predict: error: {message}"] and "Traceback" not in captured.out, captured.err
        assert not (tmp_path / "run" / "predict").exists()


@pytest.mark.slow
def test_a_conll_file_is_tagged_scored_and_written_as_the_fine_tuning_did(family_suite, tmp_path):
    """The suite's `entities` model on its own dev.conll, read by the family as CoNLL: every
    sentence tagged, conlleval's scores equal to the search's best (eval_loss aside: predict keeps no
    logits), and predictions.conll beside the parquet the very file the fine-tuning wrote."""
    from pipelines.stages.predict import run_predict

    config_file, run_dir = family_suite
    task = run_dir / "finetune" / "entities"
    dev = config_file.parent / "dev.conll"
    sentences = [block for block in dev.read_text().split("\n\n") if block.strip()]
    overrides = [
        f"run_dir={tmp_path}/run",
        f"predict.model={task / 'best'}",
        f"predict.input={dev}",
        "predict.workers=1",
    ]
    out = Path(run_predict(load_config(overrides=overrides)))
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "token_classification" and manifest["family_files"] == ["predictions.conll"]
    assert manifest["rows"] == {"read": len(sentences), "predicted": len(sentences), "rejected": {}}
    best = json.loads((task / "best.json").read_text())
    assert manifest["metrics"]["rows"] == len(sentences) and manifest["metrics"]["label_not_tags"] == 0
    for name in ("precision", "recall", "f1", "accuracy"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name]), name
    assert (out / "predictions.conll").read_text() == (task / "predictions.conll").read_text()
    got = predictions(out)
    assert [len(got[str(i)]["tags"]) for i in range(len(sentences))] == [len(s.splitlines()) for s in sentences]
