"""Reading a torch.distributed.checkpoint folder without running code from it. DCP pickles the
folder's `.metadata` and the state dict's non-tensor values (the optimizer's hyperparameters), and
its own reader and planner unpickle both unrestricted. Here:
- `.metadata` is unpickled with `find_class` limited to DCP's metadata classes (METADATA_GLOBALS),
  as torch's weights_only unpickler limits its globals; that unpickler itself stops at the
  protocol-4 opcodes DCP writes with `pickle.dump`;
- the shards it names must be plain files directly in the folder, and are opened without following
  a link;
- the non-tensor values are read with torch.load(weights_only=True), as DCP reads the tensors.
A file that fails any of these is a BadInput naming it. This is the product's only unpickler.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import stat
from contextlib import contextmanager

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader, _StorageInfo

from ..errors import BadInput

METADATA = ".metadata"

METADATA_GLOBALS = {
    (g.__module__, g.__qualname__): g
    for g in (
        dcp_metadata.Metadata,
        dcp_metadata.StorageMeta,
        dcp_metadata.MetadataIndex,
        dcp_metadata.TensorStorageMetadata,
        dcp_metadata.BytesStorageMetadata,
        dcp_metadata.ChunkStorageMetadata,
        dcp_metadata.TensorProperties,
        dcp_metadata._MEM_FORMAT_ENCODING,
        _StorageInfo,
        torch.Size,
        torch.serialization._get_layout,  # a layout by its name: torch.strided
        pathlib.PosixPath,  # StorageMeta.checkpoint_id: the folder DCP wrote to
    )
} | {("torch", name): dtype for name, dtype in vars(torch).items() if isinstance(dtype, torch.dtype)}
"""What torch 2.13's DCP writes into `.metadata` (a dtype pickles as `torch.<name>`): data classes,
whose unpickling sets fields and runs no other code."""


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        found = METADATA_GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not one of DCP's metadata classes")
        return found


def _plain_file(folder: str, name: object) -> bool:
    """`name` is a file directly in `folder`, not a link."""
    if not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name:
        return False
    try:
        return stat.S_ISREG(os.lstat(os.path.join(folder, name)).st_mode)
    except OSError:
        return False


def read_metadata(folder: str) -> dcp_metadata.Metadata:
    """The folder's DCP metadata, every shard it names checked to be a plain file of the folder."""
    path = os.path.join(folder, METADATA)
    try:
        with open(path, "rb") as f:
            metadata = _MetadataUnpickler(f).load()
    # A pickle can fail in any way (pickle's docs list AttributeError, EOFError, ImportError,
    # IndexError); each means a file that is not DCP's metadata.
    except Exception as e:
        raise BadInput(f"{path}: not a checkpoint's metadata ({type(e).__name__}: {e}); refusing to read it") from e
    if type(metadata) is not dcp_metadata.Metadata or not isinstance(metadata.storage_data, dict):
        raise BadInput(f"{path}: holds a {type(metadata).__name__}, not DCP's metadata; refusing to read it")
    for info in metadata.storage_data.values():
        if type(info) is not _StorageInfo or info.transform_descriptors or not _plain_file(folder, info.relative_path):
            where = info.relative_path if type(info) is _StorageInfo else info
            raise BadInput(
                f"{path}: names {where!r}, not a plain file of {folder} (a link, another folder, a "
                "transform DCP did not write here); refusing to read it"
            )
    return metadata


class _FolderFiles(FileSystem):
    """Opens shards for reading without following a link: read_metadata checked them, and a file
    swapped for a link since stays unread."""

    @contextmanager
    def create_stream(self, path, mode):
        if mode != "rb":
            raise ValueError(f"{path}: a checkpoint is only read here")
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), "rb") as stream:
            yield stream


class _CheckedReader(FileSystemReader):
    """DCP's file reader given the metadata read_metadata checked, instead of unpickling it itself."""

    def __init__(self, folder: str, metadata: dcp_metadata.Metadata):
        super().__init__(folder)
        self.fs = _FolderFiles()
        self.metadata = metadata

    def read_metadata(self, *args, **kwargs) -> dcp_metadata.Metadata:
        if self.metadata.storage_meta is None:
            self.metadata.storage_meta = dcp_metadata.StorageMeta()
        self.metadata.storage_meta.load_id = self.load_id
        return self.metadata


class _PlainValuesPlanner(DefaultLoadPlanner):
    """DCP's planner reading the non-tensor values with weights_only=True (its own passes False). A
    refused value is recorded, not raised: DCP would wrap it in an exception per rank."""

    def __init__(self):
        super().__init__()
        self.refused: list[str] = []

    def load_bytes(self, read_item, value) -> None:
        fqn = read_item.dest_index.fqn
        try:
            loaded = torch.load(value, map_location="cpu", weights_only=True)
        except Exception:  # the bytes are the file's: refused ones and garbage alike are its fault
            self.refused.append(fqn)
            return
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[fqn], loaded)
        else:
            self.state_dict[fqn] = loaded


def load_state(state: dict, folder: str, no_dist: bool) -> None:
    """dcp.load of `state` (in place) from `folder`, read as this module's docstring says."""
    metadata = read_metadata(folder)
    planner = _PlainValuesPlanner()
    dcp.load(state, storage_reader=_CheckedReader(folder, metadata), planner=planner, no_dist=no_dist)
    if planner.refused:
        files = {index.fqn: info.relative_path for index, info in metadata.storage_data.items()}
        refused = ", ".join(f"{fqn} (in {os.path.join(folder, files.get(fqn, '?'))})" for fqn in planner.refused)
        raise BadInput(f"{folder}: {refused}: not plain data readable with weights_only=True; refusing to use it")
