"""transformers ALBERT directories, local or s3:// (a finetune.pretrained, a train.init_from, the
pretrain stage's export): the check that a path is one, and its config.json."""

from __future__ import annotations

import json
from typing import Any

from ..errors import MissingInput
from . import exists, join, read_bytes


def require_model_dir(path: str, key: str, hint: str = "") -> None:
    """MissingInput naming `key` unless `path` holds a config.json."""
    if not exists(join(path, "config.json")):
        raise MissingInput(f"{key}: {path} has no config.json (not a transformers ALBERT directory{hint})")


def read_model_config(path: str, key: str) -> dict[str, Any]:
    """The directory's config.json (transformers' AlbertConfig keys)."""
    require_model_dir(path, key)
    return json.loads(read_bytes(join(path, "config.json")))


__all__ = ["read_model_config", "require_model_dir"]
