"""Corpus files and the documents in them, with every rejected document counted by reason.

Formats: `text` (a file is a document), `text_blank_line_docs` (one sentence per line, a blank line
between documents: the original BERT/ALBERT input), `jsonl` (a line is a document) and `parquet`
(a row is a document). `.gz` files are decompressed on the fly; `auto` picks by extension.
Every file found is listed, hidden and `_`-prefixed names included; what cannot be read (an
unreadable folder or file, a FIFO or device, a link loop, a truncated or corrupt file) is counted
as rejected under a reason, never opened when the listing already knows, and never left out silently.
"""

from __future__ import annotations

import errno
import glob as globlib
import gzip
import io
import json
import os
import posixpath
import stat
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import pyarrow as pa

from ..errors import BadInput, MissingInput, UserError
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
# Reasons a whole input is not used (a file, or a folder that cannot be listed), counted as one each.
UNREADABLE, CORRUPT, NOT_A_REGULAR_FILE, SYMLINK_LOOP = "unreadable", "corrupt", "not_a_regular_file", "symlink_loop"


@dataclass(frozen=True)
class InputFile:
    url: str  # as the filesystem reads it (local absolute path or s3://bucket/key)
    source: str  # stable name: root folder name + path below it, the same locally and on s3
    size: int
    format: str
    rejected: str = ""  # a reason the listing found: counted under it, never opened
    detail: str = ""

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
    """Expand files, folders and globs (local or s3://), every name included (`_SUCCESS`, `.x.txt`).
    Fails at once, naming the path, when one matches nothing or cannot be read; an entry that
    cannot be used (an unreadable folder, a FIFO, a link loop) is listed as rejected, to be counted."""
    files: dict[str, InputFile] = {}
    for root in paths:
        fs, p = filesystem(root)
        protocol = "s3://" if root.startswith("s3://") else ""
        try:
            base, found = _expand_remote(fs, p) if protocol else _expand_local(fs, p)
        except (FileNotFoundError, UserError):
            raise
        except Exception as e:  # permissions, missing bucket, bad credentials
            raise OSError(f"corpus.paths: cannot read {root}: {type(e).__name__}: {e}") from e
        if found is None:
            raise MissingInput(f"corpus.paths: {root} ({resolve_pkg(root)}) does not exist")
        if not found:
            raise MissingInput(f"corpus.paths: {root} matches no files")
        for m, size, reason, detail in sorted(found):
            source = key_relpath(m, base) if base else m
            if source in files:
                raise BadInput(
                    f"corpus.paths: two inputs share the name {source!r}: {files[source].url} and {protocol}{m}"
                )
            url = protocol + m
            if not reason and size == 0:  # an empty marker (`_SUCCESS`): no format to tell, no document
                reason, detail = EMPTY, f"{url}: an empty file"
            fmt = "" if reason else _detect_format(url, configured_format)
            files[source] = InputFile(url, source, size, fmt, reason, detail)
    return [files[s] for s in sorted(files)]


_Entry = tuple[str, int, str, str]  # path, size, rejection reason ("" for a usable file), detail


def _glob_base(p: str) -> str:
    # Sources are named from the folder holding the input on down ("speeches/x.txt"), so the same
    # tree gives the same names (and so the same examples) locally and on s3.
    literal_prefix = p[: min(p.find(c) for c in "*?[" if c in p)]
    return posixpath.dirname(posixpath.dirname(literal_prefix))


def _expand_remote(fs, p: str) -> tuple[str, list[_Entry] | None]:
    if globlib.has_magic(p):
        infos = fs.glob(p, detail=True)
        return _glob_base(p), [(m, int(i.get("size") or 0), "", "") for m, i in infos.items() if i["type"] == "file"]
    if fs.isdir(p):
        infos = fs.find(p, detail=True)
        return posixpath.dirname(p.rstrip("/")), [(m, int(i.get("size") or 0), "", "") for m, i in infos.items()]
    if fs.isfile(p):
        return posixpath.dirname(posixpath.dirname(p)), [(p, int(fs.info(p).get("size") or 0), "", "")]
    return "", None


def _expand_local(fs, p: str) -> tuple[str, list[_Entry] | None]:
    if globlib.has_magic(p):
        unlistable: list[OSError] = []
        entries = [e for m in fs.glob(p, on_error=unlistable.append) if (e := _local_entry(m)) is not None]
        for error in unlistable:  # fsspec's walk would leave these folders out without a word
            where = error.filename or p
            entries.append((where, 0, UNREADABLE, f"{where}: cannot list the folder: {error.strerror or error}"))
        return _glob_base(p), entries  # a folder that matches is not a file: not an input
    if os.path.isdir(p):
        return os.path.dirname(p.rstrip("/")), list(_walk_local(p, frozenset()))
    if os.path.lexists(p):
        return os.path.dirname(os.path.dirname(p)), [_local_entry(p)]
    return "", None


_SPECIAL_FILES = {stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "device", stat.S_IFBLK: "device"}


def _local_entry(path: str) -> _Entry | None:
    """One local entry, through links; None for a folder. Never opens it: a FIFO would block."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return path, 0, SYMLINK_LOOP, f"{path}: a loop of symbolic links"
        broken = isinstance(e, FileNotFoundError) and os.path.islink(path)
        return path, 0, UNREADABLE, f"{path}: {'a link to nothing' if broken else e.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return None
    if not stat.S_ISREG(st.st_mode):
        kind = _SPECIAL_FILES.get(stat.S_IFMT(st.st_mode), "special file")
        return path, 0, NOT_A_REGULAR_FILE, f"{path}: a {kind}, not a regular file"
    if not os.access(path, os.R_OK):
        return path, st.st_size, UNREADABLE, f"{path}: {os.strerror(errno.EACCES)}"
    return path, st.st_size, "", ""


def _walk_local(folder: str, ancestors: frozenset) -> Iterator[_Entry]:
    """Every entry below a local folder, through links to folders. A folder that cannot be listed
    and a link back to a folder above are entries to count (fsspec's find leaves the first out
    without a word and takes a link to a folder for a file)."""
    try:
        here = os.stat(folder)
        with os.scandir(folder) as it:
            names = sorted(entry.name for entry in it)
    except OSError as e:
        yield folder, 0, UNREADABLE, f"{folder}: cannot list the folder: {e.strerror or e}"
        return
    ancestors |= {(here.st_dev, here.st_ino)}
    for name in names:
        path = os.path.join(folder, name)
        entry = _local_entry(path)
        if entry is not None:
            yield entry
            continue
        try:
            st = os.stat(path)
        except OSError as e:  # changed since
            yield path, 0, UNREADABLE, f"{path}: {e.strerror or e}"
            continue
        if (st.st_dev, st.st_ino) in ancestors:
            yield path, 0, SYMLINK_LOOP, f"{path}: a link to a folder above it"
        else:
            yield from _walk_local(path, ancestors)


def _open_binary(file: InputFile):
    fs, p = filesystem(file.url)
    try:
        raw = fs.open(p, "rb")
    except OSError as e:
        raise _CannotOpen(e) from e
    return gzip.GzipFile(fileobj=raw) if file.url.endswith(".gz") else raw


def _decode(data: bytes) -> tuple[str, bool]:
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), True


def _looks_binary(data: bytes) -> bool:
    sample = data[:_SAMPLE_BYTES]
    return b"\x00" in sample


# What reading a file that opened raises when it is cut short or damaged (pyarrow's thrift errors
# are plain OSErrors): the file counts as CORRUPT; one that does not open counts as UNREADABLE.
_READ_ERRORS = (OSError, EOFError, zlib.error, pa.ArrowException)


class _CannotOpen(Exception):
    def __init__(self, error: OSError):
        super().__init__(error.strerror or str(error))


def read_documents(file: InputFile, text_field: str = "text") -> Iterator[Document | Rejected]:
    """Every document of one file, or a Rejected record naming the file, line or row and why. A file
    the listing rejected is not opened; one that fails while read (truncated .gz, corrupt parquet,
    no permission) is one more rejection, after the documents read before the failure."""
    if file.rejected:
        yield Rejected(f"{file.source}:0", file.rejected, file.detail)
        return
    reader = {
        "text": _read_text,
        "text_blank_line_docs": _read_blank_line_docs,
        "jsonl": _read_jsonl,
        "parquet": _read_parquet,
    }[file.format]
    read = 0
    try:
        for doc in reader(file, text_field):
            yield doc
            read += 1
    except _CannotOpen as e:
        yield Rejected(f"{file.source}:0", UNREADABLE, f"{file.url}: {e}")
    except UserError:
        raise
    except _READ_ERRORS as e:
        after = f" (after {read} documents)" if read else ""
        yield Rejected(f"{file.source}:{read}", CORRUPT, f"{file.url}: {type(e).__name__}: {e}{after}")


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
        stream = io.BufferedReader(Prepend(head, f))
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
                    kind = pf.schema_arrow.field(field).type
                    yield Rejected(key, NOT_TEXT, f"{file.url}: row {row}: column {field!r} is {kind}, not text")
                else:
                    yield Document(key, text, None)
                row += 1


class Prepend(io.RawIOBase):
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


__all__ = ["InputFile", "Prepend", "Document", "Rejected", "FORMATS", "list_inputs", "read_documents", "pack_units"]
