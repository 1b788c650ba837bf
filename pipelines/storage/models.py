"""transformers ALBERT directories, local or s3:// (a finetune.pretrained, a train.init_from, the
pretrain stage's export): the check that a path is one, and its config.json."""

from __future__ import annotations

import io
import json
from typing import Any

from ..errors import BadInput, MissingInput
from . import exists, join, list_names, read_bytes


def require_model_dir(path: str, key: str, hint: str = "") -> None:
    """MissingInput naming `key` unless `path` holds a config.json."""
    if not exists(join(path, "config.json")):
        raise MissingInput(f"{key}: {path} has no config.json (not a transformers ALBERT directory{hint})")


def read_model_config(path: str, key: str) -> dict[str, Any]:
    """The directory's config.json (transformers' AlbertConfig keys)."""
    require_model_dir(path, key)
    return json.loads(read_bytes(join(path, "config.json")))


def check_weights(path: str, key: str) -> None:
    """BadInput naming `key` when the weights the loader would read are a pytorch_model.bin holding
    pickled objects other than tensors (checked on the driver, before any worker loads it; nothing in
    it runs, and no tensor is allocated)."""
    from albert_model.hf import LEGACY_WEIGHTS, load_legacy_weights, weights_file  # torch: not for every command

    if weights_file(list_names(path)) == LEGACY_WEIGHTS:
        try:
            load_legacy_weights(io.BytesIO(read_bytes(join(path, LEGACY_WEIGHTS))), join(path, LEGACY_WEIGHTS), "meta")
        except ValueError as e:
            raise BadInput(f"{key}: {e}") from None


__all__ = ["check_weights", "read_model_config", "require_model_dir"]
