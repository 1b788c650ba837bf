"""A table read in streamed batches for prediction, each row keeping its place: csv and tsv (every
cell as its text, as the fine-tuning tables are read; tsv without quoting, as GLUE writes it), jsonl
(Python's json: a column may mix types) and parquet, through pyarrow's streaming readers, so a file
of any size is read in bounded memory. Only the columns predict reads are kept, as `text`, `pair`,
`id` and `label` (a JSON text: a class, a number or a list), with `row`: the row's number in its
file (0-based, the header not counted). A row's missing cell is null; a file without a configured
column is an error naming both."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import BadInput
from ..finetuning.tables import FORMATS, file_format, jsonl_rows
from ..prep.corpus import Prepend

SCHEMA = pa.schema(
    [("row", pa.int64()), ("text", pa.string()), ("pair", pa.string()), ("id", pa.string()), ("label", pa.string())]
)
BATCH_ROWS = 4096


def _header(f: BinaryIO, delimiter: str, quoting: bool) -> tuple[list[str], bytes]:
    """The header's column names and the bytes read to find them."""
    head = b""
    while b"\n" not in head:
        chunk = f.read(1 << 16)
        if not chunk:
            break
        head += chunk
    line = head.split(b"\n", 1)[0].decode("utf-8-sig", errors="replace").rstrip("\r")
    names = next(csv.reader([line], delimiter=delimiter, quoting=csv.QUOTE_MINIMAL if quoting else csv.QUOTE_NONE))
    return names, head


def _delimited(f: BinaryIO, path: str, fmt: str) -> tuple[list[str], Iterator[dict[str, list[Any]]]]:
    delimiter = "\t" if fmt == "tsv" else ","
    names, head = _header(f, delimiter, quoting=fmt == "csv")
    if not names or names == [""]:
        raise BadInput(f"{path}: the file is empty")
    reader = pacsv.open_csv(
        Prepend(head, f),
        read_options=pacsv.ReadOptions(block_size=1 << 20),
        parse_options=pacsv.ParseOptions(
            delimiter=delimiter, quote_char='"' if fmt == "csv" else False, newlines_in_values=fmt == "csv"
        ),
        convert_options=pacsv.ConvertOptions(
            column_types={name: pa.string() for name in names},
            null_values=[],
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )
    return names, (batch.to_pydict() for batch in reader)


def _jsonl(f: BinaryIO, path: str) -> Iterator[dict[str, list[Any]]]:
    rows: list[dict[str, Any]] = []
    for row in jsonl_rows(f, path):
        rows.append(row)
        if len(rows) == BATCH_ROWS:
            yield _columns(rows)
            rows = []
    if rows:
        yield _columns(rows)


def _columns(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    names = list(dict.fromkeys(k for row in rows for k in row))
    return {name: [row.get(name, _ABSENT) for row in rows] for name in names}


_ABSENT = object()
"""A jsonl row without the key: its cell is missing (null), as an empty one."""


def _parquet(f: BinaryIO, columns: list[str]) -> tuple[list[str], Iterator[dict[str, list[Any]]]]:
    table = pq.ParquetFile(f)
    names = table.schema_arrow.names
    present = [c for c in columns if c in names]
    return names, (batch.to_pydict() for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=present))


def _text(value: Any) -> str | None:
    if value is None or value is _ABSENT:
        return None
    return value if isinstance(value, str) else str(value)


SETTINGS = {"text": "text_column", "pair": "text_pair_column", "id": "id_column", "label": "label_column"}


def stream_rows(
    f: BinaryIO, path: str, text: str, pair: str | None, id_column: str | None, label: str | None
) -> Iterator[pa.Table]:
    """The file's rows as tables of SCHEMA. A csv, tsv or parquet file without a configured column
    is BadInput; a jsonl row without the key has a null cell there."""
    fmt = file_format(path, FORMATS, "table")
    keys = {k: c for k, c in {"text": text, "pair": pair, "id": id_column, "label": label}.items() if c}
    if fmt == "jsonl":
        batches = _jsonl(f, path)
    else:
        names, batches = _delimited(f, path, fmt) if fmt in ("csv", "tsv") else _parquet(f, list(keys.values()))
        for key, column in keys.items():
            if column not in names:
                raise BadInput(
                    f"{path}: no column {column!r} (predict.{SETTINGS[key]}); its columns are {', '.join(names)}"
                )
    row = 0
    for columns in batches:
        count = len(next(iter(columns.values()))) if columns else 0
        cells = {key: columns.get(column, [None] * count) for key, column in keys.items()}
        out: dict[str, list[Any]] = {"row": list(range(row, row + count))}
        for key in ("text", "pair", "id"):
            out[key] = [_text(v) for v in cells[key]] if key in cells else [None] * count
        labels = cells.get("label", [None] * count)
        out["label"] = [None if v is None or v is _ABSENT else json.dumps(v) for v in labels]
        row += count
        yield pa.table(out, schema=SCHEMA)


__all__ = ["SCHEMA", "stream_rows"]
