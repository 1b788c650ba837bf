"""predict's input as a Ray Data datasource: the files of predict.input read one per read task, in
bounded memory, each row checked by the family's inference where it is read (reading.file_rows).
Imported only where predict runs on Ray Data, so a small input predicted in the command's own
process never imports Ray."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from ray.data.datasource import FileBasedDatasource

from ..inference.columns import Columns
from ..inference.embedding import rows_inference
from ..inference.reading import file_rows, open_input, random_access


class TableRows(FileBasedDatasource):
    """The files of predict.input as rows of reading.SCHEMA plus `path`, checked by the inference of
    `family` (a family's name, or embedding.EMBEDDING); `own`: the files it reads itself
    (table_files.InputTables.own), the others tables."""

    def __init__(self, paths: list[str], columns: Columns, family: str, own: list[str], **kwargs: Any):
        super().__init__(paths, **kwargs)
        self.columns = columns
        self.family = family
        self.own = set(own)

    def _open_input_source(self, filesystem: pa.fs.FileSystem, path: str, **open_args: Any) -> pa.NativeFile:
        if path in self.own or random_access(path):
            return open_input(filesystem, path, path in self.own)
        return super()._open_input_source(filesystem, path, **open_args)  # Ray's buffered, decompressed stream

    def _read_stream(self, f: pa.NativeFile, path: str):
        yield from file_rows(f, path, self.columns, rows_inference(self.family), path in self.own)


__all__ = ["TableRows"]
