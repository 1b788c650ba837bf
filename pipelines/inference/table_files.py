"""predict.input's table files, listed and each one's header or schema checked where the command
runs, so that what would stop a read task (no file, a format predict cannot read, a missing
column) is one error before Ray Data starts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow.fs as pafs

from ..errors import BadInput, MissingInput
from ..finetuning.tables import FORMATS, file_format
from ..storage import arrow_filesystem, join
from .reading import check_columns, random_access

CHECK_THREADS = 16
"""Files whose headers are read at once (each a small read; on S3 a request's round trip)."""
MAX_SKIPPED_SHOWN = 20


@dataclass(frozen=True)
class InputTables:
    """The files to read, in name order, as paths inside `filesystem` (`root`: the input itself),
    and the files skipped below a folder, relative to it: those that are no table under a name
    starting with `_` or `.`, theirs or a folder's below the input (a job's `_SUCCESS` marker,
    Hadoop's `.crc` checksums)."""

    filesystem: pafs.FileSystem
    root: str
    files: list[str]
    skipped: list[str]


def _is_marker(rel: str) -> bool:
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def _is_table(name: str) -> bool:
    try:
        file_format(name, FORMATS, "table")
    except BadInput:
        return False
    return True


def _check_format(shown: str) -> None:
    """BadInput for a file predict cannot read, by its name."""
    if file_format(shown, FORMATS, "table") == "parquet" and shown.lower().endswith(".gz"):
        raise BadInput(
            f"{shown}: a gzipped parquet file (parquet compresses its own pages and is read by row "
            "group, which needs the file itself): use the .parquet"
        )


def input_tables(path: str, columns: dict[str, str | None]) -> InputTables:
    """The table files of `path` (a file, or every file below a folder), each checked: a known
    format, and the configured `columns` (stream_rows' arguments) in a csv, tsv or parquet file.
    Every table file is read, hidden and `_` names included; another file is BadInput unless it
    is one InputTables skips."""
    fs, root = arrow_filesystem(path)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise MissingInput(f"predict.input: {path} does not exist")

    def shown(inside: str) -> str:
        return path if inside == root else join(path, inside[len(root.rstrip("/")) + 1 :])

    if info.type == pafs.FileType.File:
        _check_format(path)
        files, skipped = [root], []
    else:
        root = root.rstrip("/")
        found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
        files, skipped = [], []
        for inside in sorted(i.path for i in found if i.type == pafs.FileType.File):
            rel = inside[len(root) + 1 :]
            if _is_marker(rel) and not _is_table(rel):
                skipped.append(rel)
                continue
            _check_format(shown(inside))
            files.append(inside)
        if not files:
            listed = ", ".join(skipped[:MAX_SKIPPED_SHOWN]) + (", ..." if len(skipped) > MAX_SKIPPED_SHOWN else "")
            raise BadInput(
                f"predict.input: {path} holds no table files (skipped: {listed})"
                if skipped
                else f"predict.input: {path} holds no files"
            )

    def check(inside: str) -> None:
        opened = (
            fs.open_input_file(inside) if random_access(inside) else fs.open_input_stream(inside, compression="detect")
        )
        with opened as f:
            check_columns(f, shown(inside), **columns)

    with ThreadPoolExecutor(min(CHECK_THREADS, len(files))) as pool:
        list(pool.map(check, files))  # the first failing file's error, in name order
    return InputTables(fs, root, files, skipped)


__all__ = ["InputTables", "input_tables"]
