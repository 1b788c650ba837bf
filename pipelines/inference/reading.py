"""A table read in streamed batches for prediction, each row keeping its place: csv and tsv (Python's
csv reader over the bytes, every cell its text, as the fine-tuning tables are read; tsv without
quoting, as GLUE writes it), jsonl (Python's json: a column may mix types; a .json file may instead
hold one array of row objects, read whole) and parquet (pyarrow's row-group reader, only the columns
predict reads; it needs a random-access file), so a file of any size is read in bounded memory (but
for a .json array); or the rows a family read from a file of its own format. Only the
columns predict reads are kept (columns.py): the row's fields as one JSON object (`cells`: exactly
the values read, types kept), `id`, `label` (a JSON text), with `row`: the row's number in its file
(0-based, the header and blank lines not counted), and `rejected`: null, or why the row cannot be
predicted (REASONS here, `missing_<field>`, or the family's check_row's), in which case `cells` is
null. A file without a needed column is an error naming both."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import BadInput
from ..finetuning.inference import FamilyInference
from ..finetuning.tables import FORMATS, file_format
from .columns import Columns

SCHEMA = pa.schema(
    [
        ("row", pa.int64()),
        ("cells", pa.string()),
        ("id", pa.string()),
        ("label", pa.string()),
        ("rejected", pa.string()),
    ]
)
BATCH_ROWS = 4096
MAX_CELL_CHARS = 1 << 26
"""The csv module's default limit (131,072 characters) would reject a long document as a bad row."""
REASONS = ("bad_row", "not_utf8")
"""Why a row is not predicted before its family sees it (docs/predicting.md says what each means);
then `missing_<field>` (columns.py), and the family's own reasons."""

Row = tuple[dict[str, Any] | None, str | None]
"""A row's cells by key (None where the row could not be parsed), and the reason found while parsing
it (bad_row, not_utf8) or None."""
Check = Callable[[Mapping[str, Any]], str | None]
"""The family's check_row."""


def random_access(path: str) -> bool:
    """Whether the file must be opened for random access (parquet's footer is at its end)."""
    return file_format(path, FORMATS, "table") == "parquet"


def is_utf8(value: Any) -> bool:
    """Whether every text in `value` (a list's and an object's too) came from valid UTF-8: bytes that
    are not were decoded as lone surrogates (surrogateescape), which no UTF-8 encodes (a JSON escape
    such as \\udc80 makes one too)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(is_utf8(k) and is_utf8(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(is_utf8(v) for v in value)
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


def _present(path: str, names: list[str], columns: Columns) -> dict[str, str]:
    """The columns read from a file with these column names, by key: BadInput naming the first
    needed one it lacks; another field's where it has it."""
    for key, column in columns.needed().items():
        if column not in names:
            raise BadInput(f"{path}: no column {column!r} ({columns.source(key)}); its columns are {', '.join(names)}")
    return {key: column for key, column in columns.keys().items() if column in names}


def _delimited_rows(records: Iterator[list[str] | None], names: list[str], keys: dict[str, str]) -> Iterator[Row]:
    index = {name: i for i, name in reversed(list(enumerate(names)))}  # a repeated name: its first column
    for record in records:
        if record is None or len(record) != len(names):
            yield None, "bad_row"
        elif not is_utf8(record):
            yield None, "not_utf8"
        else:
            yield {key: record[index[column]] for key, column in keys.items()}, None


def _jsonl_rows(f: BinaryIO, keys: dict[str, str], path: str) -> Iterator[Row]:
    lines = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape")
    for line in lines:
        if not line.strip():
            continue
        if line.lstrip().startswith("[") and path.lower().removesuffix(".gz").endswith(".json"):
            yield from _array_rows(line + lines.read(), keys, path)  # json.dump(rows)'s file, read whole
            return
        if not is_utf8(line):
            yield None, "not_utf8"
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError):
            yield None, "bad_row"
            continue
        yield _object_row(row, keys)


def _array_rows(text: str, keys: dict[str, str], path: str) -> Iterator[Row]:
    """The rows of a .json file holding one JSON array of row objects (an element that is no object
    is a bad_row); a file that is not valid JSON or UTF-8 as a whole is BadInput naming where."""
    if not is_utf8(text):
        raise BadInput(f"{path}: not UTF-8 (a .json file holding one array of rows is read whole)")
    try:
        rows = json.loads(text)
    except ValueError as e:
        why = "a .json file is JSON Lines or one array of row objects"
        raise BadInput(f"{path}: not valid JSON ({e}); {why}") from None
    except RecursionError:
        raise BadInput(f"{path}: JSON nested too deep") from None
    for row in rows:
        yield _object_row(row, keys)


def _object_row(row: Any, keys: dict[str, str]) -> Row:
    return (
        ({key: row.get(column) for key, column in keys.items()}, None) if isinstance(row, dict) else (None, "bad_row")
    )


def _parquet_rows(table: pq.ParquetFile, keys: dict[str, str]) -> Iterator[Row]:
    for batch in table.iter_batches(batch_size=BATCH_ROWS, columns=list(dict.fromkeys(keys.values()))):
        columns = batch.to_pydict()
        for i in range(batch.num_rows):
            yield {key: columns[column][i] for key, column in keys.items()}, None


def _rejection(cells: dict[str, Any], fields: dict[str, Any], columns: Columns, check: Check) -> str | None:
    """Why a row (its cells, of which its fields) cannot be predicted, or None: not_utf8, the
    family's reason, or a demanded field's absence (`missing_<field>`)."""
    if not is_utf8(cells):
        return "not_utf8"
    reason = check(fields)
    if reason is None:
        missing = [f for f in columns.demanded if fields.get(f) is None]
        reason = f"missing_{missing[0]}" if missing else None
    return reason


def check_columns(f: BinaryIO, path: str, columns: Columns) -> None:
    """BadInput where a csv, tsv or parquet file has no header or lacks a needed column, read from
    its header or schema alone (a jsonl row without a key is rejected, not the file)."""
    fmt = file_format(path, FORMATS, "table")
    if fmt in ("csv", "tsv"):
        _present(path, _header(_records(f, fmt), path), columns)
    elif fmt == "parquet":
        _present(path, _parquet(f, path).schema_arrow.names, columns)


def _tables(found: Iterable[Row], columns: Columns, check: Check) -> Iterator[pa.Table]:
    """Rows as tables of SCHEMA, every one predicted later or `rejected` here."""
    out: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}
    for number, (cells, reason) in enumerate(found):
        whole = cells if cells is not None else {}
        fields = {f: whole.get(f) for f in columns.fields if f in whole}
        reason = reason or _rejection(whole, fields, columns, check)
        if reason == "not_utf8":
            whole = {}
        out["row"].append(number)
        out["cells"].append(json.dumps(fields) if reason is None else None)
        out["id"].append(None if whole.get("id") is None else str(whole["id"]))
        out["label"].append(None if whole.get("label") is None else json.dumps(whole["label"], default=str))
        out["rejected"].append(reason)
        if len(out["row"]) == BATCH_ROWS:
            yield pa.table(out, schema=SCHEMA)
            out = {name: [] for name in SCHEMA.names}
    if out["row"]:
        yield pa.table(out, schema=SCHEMA)


def stream_rows(f: BinaryIO, path: str, columns: Columns, check: Check) -> Iterator[pa.Table]:
    """The table file's rows as tables of SCHEMA. A csv, tsv or parquet file without a needed column
    is BadInput."""
    fmt = file_format(path, FORMATS, "table")
    if fmt == "jsonl":
        found = _jsonl_rows(f, columns.keys(), path)
    elif fmt == "parquet":
        table = _parquet(f, path)
        found = _parquet_rows(table, _present(path, table.schema_arrow.names, columns))
    else:
        records = _records(f, fmt)
        found = _delimited_rows(records, names := _header(records, path), _present(path, names, columns))
    yield from _tables(found, columns, check)


def own_rows(rows: list[dict[str, Any]], columns: Columns, check: Check) -> Iterator[pa.Table]:
    """The rows a family read from a file of its own format (read_file: its fields by name, and an
    `id`), as tables of SCHEMA."""
    yield from _tables(((row, None) for row in rows), columns, check)


def open_input(filesystem: pafs.FileSystem, path: str, own: bool) -> pa.NativeFile:
    """One input file opened for `file_rows`: a family's own file as its bytes are stored (read_file
    decompresses it), a parquet file for random access (its footer is at its end; its row groups are
    still read one at a time, as Ray Data's own ORC reader does), any other as a stream,
    decompressed after its suffix (`.gz`)."""
    if own:
        return filesystem.open_input_stream(path, compression=None)
    if random_access(path):
        return filesystem.open_input_file(path)
    return filesystem.open_input_stream(path, compression="detect")


def file_rows(f: BinaryIO, path: str, columns: Columns, inference: FamilyInference, own: bool) -> Iterator[pa.Table]:
    """An opened input file's rows: SCHEMA plus `path`, checked by the family's inference (its own
    format read whole by its read_file, a table streamed)."""
    if own:
        tables = own_rows(inference.read_file(path, f.read()) or [], columns, inference.check_row)
    else:
        tables = stream_rows(f, path, columns, inference.check_row)
    for table in tables:
        yield table.append_column("path", pa.array([path] * table.num_rows, pa.string()))


__all__ = [
    "REASONS",
    "SCHEMA",
    "check_columns",
    "file_rows",
    "is_utf8",
    "open_input",
    "own_rows",
    "random_access",
    "stream_rows",
]
