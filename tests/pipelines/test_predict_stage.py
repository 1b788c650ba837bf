"""The predict stage (albert-ray predict) through Ray Data, on the shared suite's exports
(`family_suite`): a prediction per usable row under its own id, the rejected rows counted by
reason, probabilities equal to transformers' for the same model, and the fine-tuning stage's
metrics recomputed on the same rows."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import transformers

from pipelines.config import load_config
from pipelines.errors import BadInput

from .family_tasks import GLUE


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
            "predict.max_seq_length=32",
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

    # transformers' model and tokenizer on the same rows: the same probabilities and classes
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
    np.testing.assert_allclose(ours, expected, atol=1e-5)
    names = manifest["label_names"]
    assert [got[str(i)]["prediction"] for i in range(len(dev))] == [names[i] for i in expected.argmax(1)]

    # the search's metrics on the same rows (its eval set is this dev set)
    best = json.loads((model.parent / "best.json").read_text())
    for name in ("accuracy", "macro_f1", "mcc", "eval_loss"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name], abs=1e-5), name
    assert manifest["metrics"]["rows"] == len(dev)


@pytest.mark.slow
def test_a_multi_label_model_over_a_folder_of_tables(family_suite, tmp_path):
    """Ids are `file:row` in a folder; the predictions equal the search's own predictions file on
    the same rows (a file without a column: tests/pipelines/inference/test_reading.py)."""
    from pipelines.stages.predict import run_predict

    config_file, run_dir = family_suite
    model = run_dir / "finetune" / "topics" / "best"
    folder = tmp_path / "tables"
    folder.mkdir()
    eval_csv = (config_file.parent / "topics_eval.csv").read_text()
    (folder / "a.csv").write_text(eval_csv)
    (folder / "b.jsonl").write_text(
        json.dumps({"text": "goal match today"}) + "\n" + json.dumps({"topics": "x"}) + "\n"
    )
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
    assert manifest["rows"] == {"read": 22, "predicted": 21, "rejected": {"empty_text": 1}}
    got = predictions(out)
    assert sorted(got) == sorted([f"a.csv:{i}" for i in range(20)] + ["b.jsonl:0", "b.jsonl:1"])
    searched = {
        p["id"]: p["prediction"] for p in map(json.loads, (model.parent / "predictions.jsonl").read_text().splitlines())
    }
    assert {i: got[f"a.csv:{i}"]["prediction"] for i in range(20)} == searched
    best = json.loads((model.parent / "best.json").read_text())
    assert manifest["metrics"]["rows"] == 20  # b.jsonl's labelled row has no text; its other row no label
    for name in ("micro_f1", "macro_f1", "subset_accuracy"):
        assert manifest["metrics"][name] == pytest.approx(best["metrics"][name]), name


def test_an_export_predict_does_not_serve_is_refused_by_name(family_suite, tmp_path):
    from pipelines.stages.predict import run_predict

    _, run_dir = family_suite
    (tmp_path / "rows.csv").write_text("text\nhello\n")
    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            f"predict.model={run_dir}/finetune/entities/best",
            f"predict.input={tmp_path}/rows.csv",
        ]
    )
    with pytest.raises(BadInput, match="a AlbertForTokenClassification export; predict serves sequence"):
        run_predict(config)
