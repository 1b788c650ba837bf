"""How predict's read tasks turn a file into rows, without Ray: a family's own files read by it as
stored (it decompresses them itself) and the others as tables; a row only encoding finds unusable
rejected with its reason beside the rows the read found bad."""

import gzip
import json
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from pipelines.config import PredictSection
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.families.classification.inference import INFERENCE as CLASSIFIER
from pipelines.finetuning.inference import Encoded
from pipelines.inference.columns import table_columns
from pipelines.inference.predictor import Predictor


class GzippedLines:
    """A family reading `.lines.gz` files of its own, a row per line (it decompresses them itself:
    read_file takes a file's bytes as stored), checked as a classifier's rows."""

    fields, required, output = CLASSIFIER.fields, CLASSIFIER.required, CLASSIFIER.output
    file_suffixes = (".lines",)
    check_row = staticmethod(CLASSIFIER.check_row)

    def read_file(self, path: str, data: bytes) -> list[dict]:
        lines = gzip.decompress(data).decode().splitlines()
        return [{"id": f"line {i}", "text": line, "label": "x"} for i, line in enumerate(lines)]


def test_a_familys_own_files_are_read_by_it_as_stored_and_the_others_as_tables(ray_session, tmp_path, monkeypatch):
    """(Ray Data's file datasource starts Ray when it opens a file: the session's, not one of its own
    that a later ray_session would find in the way.)"""
    from pipelines.stages.predict_source import TableRows

    monkeypatch.setitem(FAMILIES, "lines", SimpleNamespace(load_inference=GzippedLines))
    (tmp_path / "a.lines.gz").write_bytes(gzip.compress(b"one\n \ntwo\n"))
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(b"text\nthree\n"))
    paths = [str(tmp_path / "a.lines.gz"), str(tmp_path / "b.csv.gz")]
    fs = pafs.LocalFileSystem()
    source = TableRows(paths, table_columns(PredictSection(), GzippedLines()), "lines", paths[:1], filesystem=fs)
    got = []
    for path in paths:
        with source._open_input_source(fs, path) as f:
            got += [r for table in source._read_stream(f, path) for r in table.to_pylist()]
    assert [(r["path"][len(str(tmp_path)) + 1 :], r["id"], r["cells"], r["label"], r["rejected"]) for r in got] == [
        ("a.lines.gz", "line 0", '{"text": "one"}', '"x"', None),
        ("a.lines.gz", "line 1", None, '"x"', "empty_text"),
        ("a.lines.gz", "line 2", '{"text": "two"}', '"x"', None),
        ("b.csv.gz", None, '{"text": "three"}', None, None),
    ]


class EncodingRejects:
    """Multiple choice, but a row whose question is "unusable" is found so only by encoding (as
    question answering finds a text the tokenizer keeps nothing of)."""

    def __init__(self, inner):
        self.inner = inner
        self.fields, self.required, self.output = inner.fields, inner.required, inner.output

    def encode(self, rows, use) -> Encoded:
        kept = [i for i, row in enumerate(rows) if row["question"] != "unusable"]
        inner = self.inner.encode([rows[i] for i in kept], use)
        rejected = {i: "unusable_question" for i in range(len(rows)) if i not in kept}
        return Encoded(inner.features, [kept[o] for o in inner.owners], kept, rejected)

    def predictions(self, rows, encoded, outputs, use) -> list[dict]:
        found = self.inner.predictions([rows[i] for i in encoded.extra], encoded, outputs, use)
        out = [dict.fromkeys(self.output) for _ in rows]
        for i, prediction in zip(encoded.extra, found):
            out[i] = prediction
        return out


def test_a_row_only_encoding_finds_unusable_is_rejected_with_its_reason(chooser):
    from pipelines.stages.predict import PredictRows

    predictor = Predictor.load(chooser, device="cpu")
    plain = predictor.predict([{"question": "The dog", "choices": ["barks.", "moos."]}])[0]
    predictor.inference = EncodingRejects(predictor.inference)
    actor = PredictRows.__new__(PredictRows)
    actor.predictor, actor.root = predictor, "in.jsonl"
    rows = [{"question": q, "choices": ["barks.", "moos."]} for q in ("unusable", "The dog")]
    batch = pa.table(
        {
            "row": [0, 1, 2],
            "cells": [json.dumps(rows[0]), None, json.dumps(rows[1])],
            "id": [None, None, "q"],
            "label": [None, None, None],
            "rejected": [None, "bad_row", None],
            "path": ["in.jsonl"] * 3,
        }
    )
    got = actor(batch).to_pylist()
    assert [(r["id"], r["prediction"], r["rejected"]) for r in got] == [
        ("0", None, "unusable_question"),
        ("1", None, "bad_row"),
        ("q", plain["prediction"], None),
    ]
    assert got[2]["probabilities"] == pytest.approx(plain["probabilities"]) and got[0]["probabilities"] is None


def test_a_predict_actor_leaves_no_copy_of_the_model_behind(chooser, tmp_path, monkeypatch):
    """Each Ray Data actor writes the model's files to a local folder to load them; the folder goes
    once they are loaded, or every predict run leaves a model's copy per actor in the node's /tmp."""
    import tempfile

    from pipelines.stages.predict import PredictRows
    from pipelines.storage.models import read_model_files

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    actor = PredictRows(read_model_files(chooser, "predict.model"), 24, 8, "in.jsonl", 1.0)
    assert list(scratch.iterdir()) == []
    row = {"question": "The dog", "choices": ["barks.", "moos."]}
    batch = pa.table(
        {"row": [0], "cells": [json.dumps(row)], "id": ["q"], "label": [None], "rejected": [None], "path": ["in.jsonl"]}
    )
    got = actor(batch).to_pylist()[0]
    assert got["prediction"] == Predictor.load(chooser, device="cpu").predict([row])[0]["prediction"]
