"""Tables read for prediction in streamed batches: every row kept with its number, cells as text,
a missing cell null, a missing column an error naming the file and the key."""

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.errors import BadInput
from pipelines.inference import reading
from pipelines.inference.reading import stream_rows


def rows(data: bytes, path: str, **columns) -> list[dict]:
    columns = {"text": "text", "pair": None, "id_column": None, "label": None, **columns}
    return [r for table in stream_rows(io.BytesIO(data), path, **columns) for r in table.to_pylist()]


def test_csv_cells_are_their_text_and_rows_keep_their_number_across_batches(monkeypatch):
    monkeypatch.setattr(reading, "BATCH_ROWS", 2)  # jsonl batches; csv blocks are pyarrow's
    got = rows(b'id,text,label\n007,"a, b",NA\n2,,x\n3,"multi\nline",y\n', "t.csv", id_column="id", label="label")
    assert [(r["row"], r["id"], r["text"], r["label"]) for r in got] == [
        (0, "007", "a, b", '"NA"'),
        (1, "2", "", '"x"'),
        (2, "3", "multi\nline", '"y"'),
    ]
    lines = "".join(json.dumps({"text": f"t{i}"} if i != 3 else {"other": 1}) + "\n" for i in range(5))
    got = rows(lines.encode(), "t.jsonl")
    assert [(r["row"], r["text"]) for r in got] == [(0, "t0"), (1, "t1"), (2, "t2"), (3, None), (4, "t4")]


def test_tsv_reads_quotes_as_text_and_parquet_reads_its_columns(tmp_path):
    got = rows(b'sentence1\tsentence2\n"to "execute\tok\n', "dev.tsv", text="sentence1", pair="sentence2")
    assert (got[0]["text"], got[0]["pair"]) == ('"to "execute', "ok")
    pq.write_table(pa.table({"text": ["a", None], "topics": [["x", "y"], []]}), tmp_path / "p.parquet")
    got = rows((tmp_path / "p.parquet").read_bytes(), "p.parquet", label="topics")
    assert [(r["text"], json.loads(r["label"])) for r in got] == [("a", ["x", "y"]), (None, [])]


def test_a_missing_column_is_named_with_the_file():
    with pytest.raises(BadInput, match=r"t.csv: no column 'body' \(predict.text_column\); its columns are text"):
        rows(b"text\nhello\n", "t.csv", text="body")
    with pytest.raises(BadInput, match=r"t.csv: no column 'g' \(predict.label_column\)"):
        rows(b"text\nhello\n", "t.csv", label="g")
