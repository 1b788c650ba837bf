"""Tables read for prediction in streamed batches, from files opened as Ray Data opens them (a
non-seekable stream; parquet random-access): every row kept with its number, cells as text, and
a row that cannot be predicted kept with the reason (the family's check_row's: here a
classifier's); a missing column an error naming the file and the key; a family's own rows
checked alike."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from pipelines.config import PredictSection
from pipelines.errors import BadInput
from pipelines.finetuning.families.classification.inference import INFERENCE
from pipelines.inference import reading
from pipelines.inference.columns import table_columns
from pipelines.inference.reading import check_columns, own_rows, stream_rows

KEYS = {"text": "text_column", "pair": "text_pair_column", "id_column": "id_column", "label": "label_column"}


def columns(**settings):
    """The columns a classifier's rows are read from under these predict settings (KEYS' names)."""
    return table_columns(PredictSection(**{KEYS[k]: v for k, v in settings.items()}), INFERENCE)


def flat(table_rows: list[dict]) -> list[dict]:
    """Rows with their fields (`cells`, a JSON object) as `text` and `pair`."""
    for r in table_rows:
        cells = json.loads(r["cells"]) if r["cells"] is not None else {}
        r["text"], r["pair"] = cells.get("text"), cells.get("text_pair")
    return table_rows


def opened(path: Path):
    """The file as the datasource opens it: parquet random-access, the others as a stream."""
    fs = pafs.LocalFileSystem()
    return fs.open_input_file(str(path)) if path.suffix == ".parquet" else fs.open_input_stream(str(path))


def rows(path: Path, data: bytes | None = None, **settings) -> list[dict]:
    if data is not None:
        path.write_bytes(data)
    with opened(path) as f:
        found = stream_rows(f, str(path), columns(**settings), INFERENCE.check_row)
        return flat([r for table in found for r in table.to_pylist()])


def test_csv_cells_are_their_text_and_rows_keep_their_number_across_batches(tmp_path, monkeypatch):
    monkeypatch.setattr(reading, "BATCH_ROWS", 2)
    data = b'id,text,label\n007,"a, b",NA\n2,,x\n3,"multi\nline",y\n'
    got = rows(tmp_path / "t.csv", data, id_column="id", label="label")
    assert [(r["row"], r["id"], r["text"], r["label"], r["rejected"]) for r in got] == [
        (0, "007", "a, b", '"NA"', None),
        (1, "2", None, '"x"', "empty_text"),
        (2, "3", "multi\nline", '"y"', None),
    ]
    lines = "".join(json.dumps({"text": f"t{i}"} if i != 3 else {"other": 1}) + "\n" for i in range(5))
    got = rows(tmp_path / "t.jsonl", lines.encode())
    assert [(r["row"], r["text"], r["rejected"]) for r in got] == [
        (0, "t0", None),
        (1, "t1", None),
        (2, "t2", None),
        (3, None, "missing_text"),
        (4, "t4", None),
    ]


def test_tsv_reads_quotes_as_text_and_a_long_cell_whole(tmp_path):
    long = "word " * 40_000  # past the csv module's default field limit (131,072 characters)
    data = f'sentence1\tsentence2\n"to "execute\tok\n{long}\tx\n'.encode()
    got = rows(tmp_path / "dev.tsv", data, text="sentence1", pair="sentence2")
    assert [(r["text"], r["pair"], r["rejected"]) for r in got] == [('"to "execute', "ok", None), (long, "x", None)]


def test_parquet_is_read_in_row_groups_keeping_its_types(tmp_path):
    table = pa.table(
        {
            "text": ["a", None, "c", " ", "e"],
            "topics": [["x", "y"], [], None, ["z"], ["x"]],
            "n": [1, 2, 3, 4, 5],
            "unread": [b"\xff"] * 5,
        }
    )
    pq.write_table(table, tmp_path / "p.parquet", row_group_size=2)
    got = rows(tmp_path / "p.parquet", label="topics", id_column="n")
    assert [(r["row"], r["id"], r["text"], r["label"], r["rejected"]) for r in got] == [
        (0, "1", "a", '["x", "y"]', None),
        (1, "2", None, "[]", "missing_text"),
        (2, "3", "c", None, None),
        (3, "4", None, '["z"]', "empty_text"),
        (4, "5", "e", '["x"]', None),
    ]
    assert {r["rejected"] for r in rows(tmp_path / "p.parquet", text="n")} == {"not_a_string"}


def test_every_jsonl_line_is_a_row_predicted_or_rejected_with_its_reason(tmp_path):
    """Issue #43: `{}` rows were dropped, a number or a list predicted as its repr, and a line that
    is not JSON ended the command after Ray's tracebacks."""
    lines = [
        b'{"text": "fine", "pair": "too", "id": 7}',
        b"{}",
        b'{"pair": "no text"}',
        b'{"text": null, "pair": "x"}',
        b'{"text": 5, "pair": "x"}',
        b'{"text": 1.5, "pair": "x"}',
        b'{"text": ["a list"], "pair": "x"}',
        b'{"text": {"an": "object"}, "pair": "x"}',
        b'{"text": true, "pair": "x"}',
        b'{"text": " ", "pair": "x"}',
        b'{"text": "a text", "pair": 5}',
        b'{"text": "a text"}',
        b'{"text": "a text", "pair": "\\t"}',
        b"",  # a blank line is no row
        b"{not json",
        b'["an", "array"]',
        b'{"text": "caf\xe9", "pair": "x"}',
        b'{"text": "\\udc80 escaped", "pair": "x"}',
        b'{"text": "last", "pair": "one", "id": "z"}',
    ]
    got = rows(tmp_path / "t.jsonl", b"\n".join(lines) + b"\n", pair="pair", id_column="id")
    assert [(r["row"], r["rejected"]) for r in got] == [
        (0, None),
        (1, "missing_text"),
        (2, "missing_text"),
        (3, "missing_text"),
        (4, "not_a_string"),
        (5, "not_a_string"),
        (6, "not_a_string"),
        (7, "not_a_string"),
        (8, "not_a_string"),
        (9, "empty_text"),
        (10, "not_a_string"),
        (11, "missing_text_pair"),
        (12, "empty_text_pair"),
        (13, "bad_row"),
        (14, "bad_row"),
        (15, "not_utf8"),
        (16, "not_utf8"),
        (17, None),
    ]
    assert [(r["text"], r["pair"], r["id"]) for r in (got[0], got[-1])] == [("fine", "too", "7"), ("last", "one", "z")]
    assert all(r["text"] is None and r["pair"] is None for r in got[1:-1])


def test_a_json_file_holding_one_array_of_rows_is_read_row_by_row(tmp_path):
    """A .json file as json.dump(rows) writes it (one array, over lines or not): each element a row,
    one that is no object a bad_row (it was read as one JSON line: a single bad_row); a .jsonl file
    starting with an array line is still JSON Lines; a .json array that is not valid JSON as a whole
    is an error naming the file."""
    array = [{"text": "one", "id": "a"}, {"text": "two"}, 3, {"txt": "typo"}]
    for data in (json.dumps(array), json.dumps(array, indent=2), "\n  " + json.dumps(array)):
        got = rows(tmp_path / "t.json", data.encode(), id_column="id")
        assert [(r["row"], r["text"], r["id"], r["rejected"]) for r in got] == [
            (0, "one", "a", None),
            (1, "two", None, None),
            (2, None, None, "bad_row"),
            (3, None, None, "missing_text"),
        ], data
    lines = rows(tmp_path / "t.jsonl", b'["an", "array"]\n{"text": "kept"}\n')
    assert [(r["rejected"], r["text"]) for r in lines] == [("bad_row", None), (None, "kept")]
    with pytest.raises(BadInput, match=r"t.json: not valid JSON \(.*\); a .json file is JSON Lines or one array"):
        rows(tmp_path / "t.json", b'[{"text": "one"},\n{"text": ]')


def test_a_csv_row_not_utf8_or_with_another_number_of_fields_is_rejected_and_the_rest_read(tmp_path):
    """Issue #43: either ended the command with an ArrowInvalid traceback."""
    data = b'text,id\n"one\ntwo",a\ncaf\xe9,b\nx,c,extra\nlonely\n"quoted, ""fine""",e\nok,\xff\n'
    got = rows(tmp_path / "t.csv", data, id_column="id")
    assert [(r["row"], r["id"], r["text"], r["rejected"]) for r in got] == [
        (0, "a", "one\ntwo", None),
        (1, None, None, "not_utf8"),
        (2, None, None, "bad_row"),
        (3, None, None, "bad_row"),
        (4, "e", 'quoted, "fine"', None),
        (5, None, None, "not_utf8"),
    ]
    # a column predict does not read is part of its row too; a UTF-8 byte order mark is no text
    got = rows(tmp_path / "t.tsv", b"\xef\xbb\xbftext\tnote\nfine\tok\nfine\tcaf\xe9\n")
    assert [(r["text"], r["rejected"]) for r in got] == [("fine", None), (None, "not_utf8")]


def test_a_missing_column_is_named_with_the_file_from_its_header_or_schema_alone(tmp_path):
    (tmp_path / "t.csv").write_text("text,x\nhello,1\n")
    pq.write_table(pa.table({"text": ["hello"]}), tmp_path / "t.parquet")
    cases = [
        ("t.csv", {"text": "body"}, r"t.csv: no column 'body' \(predict.text_column\); its columns are text, x"),
        ("t.csv", {"label": "g"}, r"t.csv: no column 'g' \(predict.label_column\)"),
        ("t.parquet", {"pair": "p"}, r"t.parquet: no column 'p' \(predict.text_pair_column\); its columns are text"),
    ]
    for name, settings, message in cases:
        with pytest.raises(BadInput, match=message):
            rows(tmp_path / name, **settings)
        with opened(tmp_path / name) as f, pytest.raises(BadInput, match=message):
            check_columns(f, str(tmp_path / name), columns(**settings))
    with opened(tmp_path / "t.csv") as f:
        check_columns(f, str(tmp_path / "t.csv"), columns(label="x"))
    (tmp_path / "empty.tsv").write_bytes(b"")
    (tmp_path / "not.parquet").write_text("text\nhello\n")
    for name, message in [("empty.tsv", "empty.tsv: the file is empty"), ("not.parquet", "not.parquet: not a parquet")]:
        with opened(tmp_path / name) as f, pytest.raises(BadInput, match=message):
            check_columns(f, str(tmp_path / name), columns())


def test_a_familys_fields_keep_their_types_and_an_optional_column_is_read_where_a_file_has_it(tmp_path):
    """Multiple choice's rows: `choices` (required) a list from parquet and jsonl, kept as read; its
    optional `context` read where a file has the column, its required one named when missing."""
    from pipelines.finetuning.families.multiple_choice.inference import INFERENCE as CHOICE

    mc = table_columns(PredictSection(id_column="n"), CHOICE)
    assert (mc.fields, mc.demanded) == (
        {"question": "question", "context": "context", "choices": "choices"},
        ("choices",),
    )
    table = pa.table({"n": [1, 2, 3], "question": ["The dog", "The cat", None], "choices": [["a", "b"], ["a"], None]})
    pq.write_table(table, tmp_path / "q.parquet")
    with opened(tmp_path / "q.parquet") as f:
        got = [r for t in stream_rows(f, str(tmp_path / "q.parquet"), mc, CHOICE.check_row) for r in t.to_pylist()]
    assert [(r["id"], r["cells"] and json.loads(r["cells"]), r["rejected"]) for r in got] == [
        ("1", {"question": "The dog", "choices": ["a", "b"]}, None),
        ("2", None, "too_few_choices"),
        ("3", None, "missing_choices"),
    ]
    (tmp_path / "q.jsonl").write_text(json.dumps({"n": 1, "context": "c", "choices": ["x", 5]}) + "\n")
    with opened(tmp_path / "q.jsonl") as f:
        (row,) = [r for t in stream_rows(f, str(tmp_path / "q.jsonl"), mc, CHOICE.check_row) for r in t.to_pylist()]
    assert (row["id"], row["rejected"]) == ("1", "not_a_list_of_strings")
    pq.write_table(table.drop(["choices"]), tmp_path / "none.parquet")
    with (
        opened(tmp_path / "none.parquet") as f,
        pytest.raises(BadInput, match="no column 'choices' \\(the model's field"),
    ):
        check_columns(f, str(tmp_path / "none.parquet"), mc)


def test_rows_a_family_read_from_its_own_file_are_checked_alike():
    found = own_rows(
        [{"id": "q1", "text": "fine"}, {"id": "q2", "text": " "}, {"text": "caf\udce9"}, {"text": "no id"}],
        columns(),
        INFERENCE.check_row,
    )
    got = flat([r for table in found for r in table.to_pylist()])
    assert [(r["row"], r["id"], r["text"], r["rejected"]) for r in got] == [
        (0, "q1", "fine", None),
        (1, "q2", None, "empty_text"),
        (2, None, None, "not_utf8"),
        (3, None, "no id", None),
    ]


def test_the_docs_name_every_reason():
    docs = (Path(__file__).resolve().parents[3] / "docs" / "predicting.md").read_text()
    assert all(f"`{reason}`" in docs for reason in reading.REASONS)
