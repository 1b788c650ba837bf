"""predict.input's files, listed and each one checked where the command runs, so that what would
stop a read task (no file, a format predict cannot read, a missing column, a family's file it cannot
read) is one error before Ray Data starts: a table's header or schema, and a file of the family's
own format (its inference's `file_suffixes`: SQuAD JSON, CoNLL) read whole by the family."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from ..errors import BadInput, MissingInput
from ..finetuning.inference import FamilyInference
from ..finetuning.tables import FORMATS, file_format
from ..storage import arrow_filesystem, join
from .columns import Columns
from .reading import check_columns, open_input

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
    own: list[str] = field(default_factory=list)
    """Of `files`, those the family read as its own format (the others are tables)."""
    size: int = 0
    """The files' bytes as stored, in all (from the listing: predict's choice of where to run)."""


def own_format(inference: FamilyInference, path: str) -> bool:
    """Whether `path` ends as the files the family reads itself (its optional `file_suffixes`)."""
    suffixes = tuple(getattr(inference, "file_suffixes", ()))
    return bool(suffixes) and path.lower().removesuffix(".gz").endswith(suffixes)


def _is_marker(rel: str) -> bool:
    return any(part.startswith(("_", ".")) for part in rel.split("/"))


def _is_table(name: str, inference: FamilyInference) -> bool:
    try:
        file_format(name, FORMATS, "table")
    except BadInput:
        return own_format(inference, name)
    return True


def _check_format(shown: str, inference: FamilyInference) -> None:
    """BadInput for a file predict cannot read, by its name."""
    if own_format(inference, shown):
        return
    if file_format(shown, FORMATS, "table") == "parquet" and shown.lower().endswith(".gz"):
        raise BadInput(
            f"{shown}: a gzipped parquet file (parquet compresses its own pages and is read by row "
            "group, which needs the file itself): use the .parquet"
        )


def input_tables(path: str, columns: Columns, inference: FamilyInference) -> InputTables:
    """The table files of `path` (a file, or every file below a folder), each checked: one the
    family reads (`read_file` gives rows), or a table of a known format with the needed `columns`
    in a csv, tsv or parquet file. Every such file is read, hidden and `_` names included; another
    file is BadInput unless it is one InputTables skips."""
    fs, root = arrow_filesystem(path)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.NotFound:
        raise MissingInput(f"predict.input: {path} does not exist")

    def shown(inside: str) -> str:
        return path if inside == root else join(path, inside[len(root.rstrip("/")) + 1 :])

    if info.type == pafs.FileType.File:
        _check_format(path, inference)
        files, skipped, size = [root], [], info.size or 0
    else:
        root = root.rstrip("/")
        found = fs.get_file_info(pafs.FileSelector(root, recursive=True))
        files, skipped, size = [], [], 0
        for entry in sorted((i for i in found if i.type == pafs.FileType.File), key=lambda i: i.path):
            inside, rel = entry.path, entry.path[len(root) + 1 :]
            if _is_marker(rel) and not _is_table(rel, inference):
                skipped.append(rel)
                continue
            _check_format(shown(inside), inference)
            files.append(inside)
            size += entry.size or 0
        if not files:
            listed = ", ".join(skipped[:MAX_SKIPPED_SHOWN]) + (", ..." if len(skipped) > MAX_SKIPPED_SHOWN else "")
            raise BadInput(
                f"predict.input: {path} holds no table files (skipped: {listed})"
                if skipped
                else f"predict.input: {path} holds no files"
            )

    def check(inside: str) -> bool:
        """Whether the file is the family's own format (else a table, checked)."""
        if own_format(inference, inside):
            with open_input(fs, inside, own=True) as f:
                data = f.read()
            if inference.read_file(shown(inside), data) is not None:
                return True
        with open_input(fs, inside, own=False) as f:
            check_columns(f, shown(inside), columns)
        return False

    with ThreadPoolExecutor(min(CHECK_THREADS, len(files))) as pool:
        own = list(pool.map(check, files))  # the first failing file's error, in name order
    return InputTables(fs, root, files, skipped, [f for f, mine in zip(files, own) if mine], size)


__all__ = ["InputTables", "input_tables", "own_format"]
