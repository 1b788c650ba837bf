"""Corpus files and the documents in them, with every rejected document counted by reason.

Formats: `text` (a file is a document), `text_blank_line_docs` (one sentence per line, a blank line
between documents: the original BERT/ALBERT input), `jsonl` (a line is a document) and `parquet`
(a row is a document). `.gz` files are decompressed on the fly; `auto` picks by extension.
"""

from __future__ import annotations

import glob as globlib
import gzip
import io
import json
import posixpath
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from ..errors import BadInput, MissingInput
from ..storage import filesystem, key_relpath, resolve_pkg

FORMATS = ("text", "text_blank_line_docs", "jsonl", "parquet")
_BY_EXTENSION = {".txt": "text", ".text": "text", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}
_SAMPLE_BYTES = 8192  # enough to tell a binary file from text

# Reasons a document is not used; the manifest counts each.
EMPTY, BINARY, MALFORMED_JSON, MISSING_FIELD, NOT_TEXT, TOO_SHORT = (
    "empty",
    "binary",
    "malformed_json",
    "missing_field",
    "not_text",
    "too_short",
)


@dataclass(frozen=True)
class InputFile:
    url: str  # as the filesystem reads it (local absolute path or s3://bucket/key)
    source: str  # stable name: root folder name + path below it, the same locally and on s3
    size: int
    format: str

    def to_row(self) -> dict:
        return asdict(self)


@dataclass
class Document:
    key: str  # "<source>:<index>", stable across runs, workers and storage
    text: str | None  # raw text (text, jsonl, parquet)
    lines: list[str] | None  # sentences given one per line (text_blank_line_docs)
    replaced_bytes: bool = False  # undecodable UTF-8 bytes were replaced with U+FFFD


@dataclass
class Rejected:
    key: str
    reason: str
    detail: str


def _detect_format(url: str, configured: str) -> str:
    if configured != "auto":
        return configured
    name = url[:-3] if url.endswith(".gz") else url
    ext = posixpath.splitext(name)[1].lower()
    if ext not in _BY_EXTENSION:
        raise BadInput(
            f"{url}: cannot tell the format from extension {ext or '(none)'!r}; set corpus.format to one of {FORMATS}"
        )
    return _BY_EXTENSION[ext]


def list_inputs(paths: list[str], configured_format: str) -> list[InputFile]:
    """Expand files, folders and globs (local or s3://). Fails at once, naming the path, when one
    matches nothing or cannot be read; skips hidden and `_`-prefixed files (markers, not data)."""
    files: dict[str, InputFile] = {}
    for root in paths:
        fs, p = filesystem(root)
        protocol = "s3://" if root.startswith("s3://") else ""
        try:
            # Sources are named from the folder holding the input on down ("speeches/x.txt"), so
            # the same tree gives the same names (and so the same examples) locally and on s3.
            if globlib.has_magic(p):
                literal_prefix = p[: min(p.find(c) for c in "*?[" if c in p)]
                base = posixpath.dirname(posixpath.dirname(literal_prefix))
                matches = [m for m in fs.glob(p) if fs.isfile(m)]
            elif fs.isdir(p):
                base = posixpath.dirname(p.rstrip("/"))
                matches = fs.find(p)
            elif fs.isfile(p):
                base = posixpath.dirname(posixpath.dirname(p))
                matches = [p]
            else:
                raise MissingInput(f"corpus.paths: {root} ({resolve_pkg(root)}) does not exist")
            details = {m: fs.info(m) for m in matches}
        except FileNotFoundError:
            raise
        except Exception as e:  # permissions, missing bucket, bad credentials
            raise OSError(f"corpus.paths: cannot read {root}: {type(e).__name__}: {e}") from e
        kept = [m for m in sorted(matches) if not posixpath.basename(m).startswith((".", "_"))]
        if not kept:
            raise MissingInput(f"corpus.paths: {root} matches no files")
        for m in kept:
            source = key_relpath(m, base) if base else m
            if source in files:
                raise BadInput(
                    f"corpus.paths: two inputs share the name {source!r}: {files[source].url} and {protocol}{m}"
                )
            url = protocol + m
            files[source] = InputFile(
                url, source, int(details[m].get("size") or 0), _detect_format(url, configured_format)
            )
    return [files[s] for s in sorted(files)]


def _open_binary(file: InputFile):
    fs, p = filesystem(file.url)
    raw = fs.open(p, "rb")
    return gzip.GzipFile(fileobj=raw) if file.url.endswith(".gz") else raw


def _decode(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def _looks_binary(data: bytes) -> bool:
    sample = data[:_SAMPLE_BYTES]
    return b"\x00" in sample


def read_documents(file: InputFile, text_field: str = "text") -> Iterator[Document | Rejected]:
    """Every document of one file, or a Rejected record naming the file, line or row and why."""
    reader = {
        "text": _read_text,
        "text_blank_line_docs": _read_blank_line_docs,
        "jsonl": _read_jsonl,
        "parquet": _read_parquet,
    }[file.format]
    yield from reader(file, text_field)


def _read_text(file: InputFile, _field: str) -> Iterator[Document | Rejected]:
    with _open_binary(file) as f:
        data = f.read()
    key = f"{file.source}:0"
    if _looks_binary(data):
        yield Rejected(key, BINARY, f"{file.url}: NUL bytes, not text")
        return
    text, replaced = _decode(data)
    if not text.strip():
        yield Rejected(key, EMPTY, f"{file.url}: no text")
        return
    yield Document(key, text, None, replaced)


def _read_blank_line_docs(file: InputFile, _field: str) -> Iterator[Document | Rejected]:
    with _open_binary(file) as f:
        head = f.read(_SAMPLE_BYTES)
        if _looks_binary(head):
            yield Rejected(f"{file.source}:0", BINARY, f"{file.url}: NUL bytes, not text")
            return
        stream = io.BufferedReader(_Prepend(head, f))
        index, lines, replaced = 0, [], False
        for raw in stream:
            line, bad = _decode(raw)
            line = line.strip()
            if line:
                lines.append(line)
                replaced |= bad
            elif lines:
                yield Document(f"{file.source}:{index}", None, lines, replaced)
                index, lines, replaced = index + 1, [], False
        if lines:
            yield Document(f"{file.source}:{index}", None, lines, replaced)
        elif index == 0:
            yield Rejected(f"{file.source}:0", EMPTY, f"{file.url}: no text")


def _read_jsonl(file: InputFile, field: str) -> Iterator[Document | Rejected]:
    with _open_binary(file) as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            key = f"{file.source}:{lineno}"
            line, replaced = _decode(raw)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                yield Rejected(key, MALFORMED_JSON, f"{file.url}:{lineno}: {e.msg} at column {e.colno}")
                continue
            if not isinstance(record, dict) or field not in record:
                yield Rejected(key, MISSING_FIELD, f"{file.url}:{lineno}: no field {field!r}")
                continue
            text = record[field]
            if not isinstance(text, str):
                yield Rejected(key, NOT_TEXT, f"{file.url}:{lineno}: field {field!r} is {type(text).__name__}")
            elif not text.strip():
                yield Rejected(key, EMPTY, f"{file.url}:{lineno}: field {field!r} is empty")
            else:
                yield Document(key, text, None, replaced)


def _read_parquet(file: InputFile, field: str) -> Iterator[Document | Rejected]:
    import pyarrow.parquet as pq

    with _open_binary(file) as f:
        pf = pq.ParquetFile(f)
        if field not in pf.schema_arrow.names:
            raise BadInput(f"{file.url}: no column {field!r} (corpus.text_field); it has {pf.schema_arrow.names}")
        row = 0
        for batch in pf.iter_batches(columns=[field]):
            for text in batch.column(0).to_pylist():
                key = f"{file.source}:{row}"
                if text is None or (isinstance(text, str) and not text.strip()):
                    yield Rejected(key, EMPTY, f"{file.url}: row {row}: column {field!r} is empty")
                elif not isinstance(text, str):
                    yield Rejected(key, NOT_TEXT, f"{file.url}: row {row}: column {field!r} is not text")
                else:
                    yield Document(key, text, None)
                row += 1


class _Prepend(io.RawIOBase):
    """A stream with already-read bytes put back in front."""

    def __init__(self, head: bytes, rest):
        self._head, self._rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def pack_units(files: list[InputFile], num_workers: int, max_unit_bytes: int = 64 << 20) -> list[list[InputFile]]:
    """Group files, in order, into work units of similar size: about 16 units per worker, so the
    workers finish together, at most `max_unit_bytes` each (a bigger file is a unit of its own).
    Outputs do not depend on the grouping: every random choice is seeded per document."""
    total = sum(f.size for f in files)
    target = min(max_unit_bytes, max(1, total // (16 * max(1, num_workers))))
    units: list[list[InputFile]] = []
    current: list[InputFile] = []
    size = 0
    for f in files:
        if current and size + f.size > target:
            units.append(current)
            current, size = [], 0
        current.append(f)
        size += f.size
    if current:
        units.append(current)
    return units


__all__ = ["InputFile", "Document", "Rejected", "FORMATS", "list_inputs", "read_documents", "pack_units"]
