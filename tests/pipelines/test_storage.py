"""Paths in object stores: relative keys never depend on the process's working directory."""

import os
import posixpath

import pytest

from pipelines.storage import key_relpath, path_inside


@pytest.mark.parametrize(
    "key, root",
    [("b/p/x.txt", "b/p"), ("b/p", "b/p"), ("b/q/x", "b/p"), ("b/p/a/b", "b"), ("/a/b", "/a/c/d"), ("b/p/x", "b/p/")],
)
def test_key_relpath_is_posix_relpath(key, root):
    assert key_relpath(key, root) == posixpath.relpath(key, root)


def test_object_keys_are_related_without_a_working_directory(tmp_path, monkeypatch):
    """A Ray worker's working directory can vanish under it (the cluster test found one): object
    keys are related by their text alone."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    os.rmdir(gone)
    with pytest.raises(FileNotFoundError):
        posixpath.relpath("bucket/run/_building/vocab/x", "bucket/run/_building/vocab")
    assert key_relpath("bucket/run/_building/vocab/x", "bucket/run/_building/vocab") == "x"
    assert path_inside("s3://bucket/run", "s3://bucket/run/vocab/spiece.model") == "vocab/spiece.model"
    assert path_inside("s3://bucket/run", "s3://bucket/other") is None
