"""A table read in streamed batches for prediction, each row keeping its place: csv and tsv (Python's
csv reader over the bytes, every cell its text, as the fine-tuning tables are read; tsv without
quoting, as GLUE writes it), jsonl (Python's json: a column may mix types) and parquet (pyarrow's
row-group reader, only the columns predict reads; it needs a random-access file), so a file of any
size is read in bounded memory. Only the columns predict reads are kept, as `text`, `pair`, `id` and
`label` (a JSON text: a class, a number or a list), with `row`: the row's number in its file
(0-based, the header and blank lines not counted), and `rejected`: null, or why the row cannot be
predicted (REASONS). A file without a configured column is an error naming both."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import BadInput
from ..finetuning.tables import FORMATS, file_format

SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("text", pa.string()),
        ("pair", pa.string()),
        ("id", pa.string()),
        ("label", pa.string()),
        ("rejected", pa.string()),
    ]
)
BATCH_ROWS = 4096
MAX_CELL_CHARS = 1 << 26
"""The csv module's default limit (131,072 characters) would reject a long document as a bad row."""
REASONS = (
    "bad_row",
    "not_utf8",
    "missing_text",
    "missing_text_pair",
    "not_a_string",
    "empty_text",
    "empty_text_pair",
)
"""Why a row is not predicted (docs/predicting.md says what each means)."""
SETTINGS = {"text": "text_column", "pair": "text_pair_column", "id": "id_column", "label": "label_column"}

Row = tuple[dict[str, Any] | None, str | None]
"""A row's configured cells by key (None where the row could not be parsed), and the reason found
while parsing it (bad_row, not_utf8) or None."""


def random_access(path: str) -> bool:
    """Whether the file must be opened for random access (parquet's footer is at its end)."""
    return file_format(path, FORMATS, "table") == "parquet"


def _utf8(text: str) -> bool:
    """Whether `text` came from valid UTF-8: bytes that are not were decoded as lone surrogates
    (surrogateescape), which no UTF-8 encodes (a JSON escape such as \\udc80 makes one too)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _records(f: BinaryIO, fmt: str) -> Iterator[list[str] | None]:
    """A csv or tsv file's non-blank records (None: one the csv module could not parse)."""
    csv.field_size_limit(max(csv.field_size_limit(), MAX_CELL_CHARS))
    text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape", newline="")
    reader = csv.reader(
        text,
        delimiter="\t" if fmt == "tsv" else ",",
        quoting=csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL,
    )
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except csv.Error:  # the reader goes on at the next line
            yield None
            continue
        if record:
            yield record


def _header(records: Iterator[list[str] | None], path: str) -> list[str]:
    names = next(records, ())
    if names == ():
        raise BadInput(f"{path}: the file is empty")
    if names == [""]:
        raise BadInput(f"{path}: its first row is no header")
    # shown in messages: bytes that are not UTF-8 as U+FFFD
    return [n.encode("utf-8", "surrogateescape").decode("utf-8", "replace") for n in names]


def _parquet(f: BinaryIO, path: str) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(f)
    except pa.ArrowInvalid as e:
        raise BadInput(f"{path}: not a parquet file ({e})") from None


def _require(path: str, names: list[str], keys: dict[str, str]) -> None:
    for key, column in keys.items():
        if column not in names:
            raise BadInput(
                f"{path}: no column {column!r} (predict.{SETTINGS[key]}); its columns are {', '.join(names)}"
            )


def _delimited_rows(records: Iterator[list[str] | None], names: list[str], keys: dict[str, str]) -> Iterator[Row]:
    index = {name: i for i, name in reversed(list(enumerate(names)))}  # a repeated name: its first column
    for record in records:
        if record is None or len(record) != len(names):
            yield None, "bad_row"
        elif not all(_utf8(cell) for cell in record):
            yield None, "not_utf8"
        else:
            yield {key: record[index[column]] for key, column in keys.items()}, None


def _jsonl_rows(f: BinaryIO, keys: dict[str, str]) -> Iterator[Row]:
    for line in io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape"):
        if not line.strip():
            continue
        if not _utf8(line):
            yield None, "not_utf8"
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            yield None, "bad_row"
            continue
        yield (
            ({key: row.get(column) for key, column in keys.items()}, None)
            if isinstance(row, dict)
            else (None, "bad_row")
        )


def _parquet_rows(table: pq.ParquetFile, keys: dict[str, str]) -> Iterator[Row]:
    for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=list(dict.fromkeys(keys.values()))):
        columns = batch.to_pydict()
        for i in range(batch.num_rows):
            yield {key: columns[column][i] for key, column in keys.items()}, None


def _rejection(cells: dict[str, Any], pair: bool) -> str | None:
    """Why a row's cells cannot be predicted (one of REASONS), or None."""
    if not all(_utf8(v) for v in cells.values() if isinstance(v, str)):
        return "not_utf8"
    for key, suffix in [("text", ""), ("pair", "_pair")][: 1 + pair]:
        value = cells.get(key)
        if value is None:
            return f"missing_text{suffix}"
        if not isinstance(value, str):
            return "not_a_string"
        if not value.strip():
            return f"empty_text{suffix}"
    return None


def _keys(text: str, pair: str | None, id_column: str | None, label: str | None) -> dict[str, str]:
    return {k: c for k, c in {"text": text, "pair": pair, "id": id_column, "label": label}.items() if c}


def check_columns(
    f: BinaryIO, path: str, text: str, pair: str | None, id_column: str | None, label: str | None
) -> None:
    """BadInput where a csv, tsv or parquet file has no header or lacks a configured column, read
    from its header or schema alone (a jsonl row without a key is rejected, not the file)."""
    fmt = file_format(path, FORMATS, "table")
    keys = _keys(text, pair, id_column, label)
    if fmt in ("csv", "tsv"):
        _require(path, _header(_records(f, fmt), path), keys)
    elif fmt == "parquet":
        _require(path, _parquet(f, path).schema_arrow.names, keys)


def stream_rows(
    f: BinaryIO, path: str, text: str, pair: str | None, id_column: str | None, label: str | None
) -> Iterator[pa.Table]:
    """The file's rows as tables of SCHEMA, every row read: predicted later, or `rejected` here. A
    csv, tsv or parquet file without a configured column is BadInput."""
    fmt = file_format(path, FORMATS, "table")
    keys = _keys(text, pair, id_column, label)
    if fmt == "jsonl":
        found = _jsonl_rows(f, keys)
    elif fmt == "parquet":
        table = _parquet(f, path)
        _require(path, table.schema_arrow.names, keys)
        found = _parquet_rows(table, keys)
    else:
        records = _records(f, fmt)
        names = _header(records, path)
        _require(path, names, keys)
        found = _delimited_rows(records, names, keys)
    out: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for number, (cells, reason) in enumerate(found):
        reason = reason or _rejection(cells, pair is not None)
        usable = reason is None
        whole = cells if cells is not None and reason != "not_utf8" else {}
        out["row"].append(number)
        out["text"].append(cells["text"] if usable else None)
        out["pair"].append(whole.get("pair") if usable else None)
        out["id"].append(None if whole.get("id") is None else str(whole["id"]))
        out["label"].append(None if whole.get("label") is None else json.dumps(whole["label"], default=str))
        out["rejected"].append(reason)
        if len(out["row"]) == BATCH_ROWS:
            yield pa.table(out, schema=SCHEMA)
            out = {name: [] for name in SCHEMA.names}
    if out["row"]:
        yield pa.table(out, schema=SCHEMA)


__all__ = ["REASONS", "SCHEMA", "check_columns", "random_access", "stream_rows"]
