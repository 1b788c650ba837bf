"""A model folder whose `pytorch_model.bin` holds, beside its tensors, a pickled object whose
unpickling would run code (it creates a sentinel file): what the loaders must refuse unrun."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file


class Sentinel:
    """Unpickled, it creates `path`: any call a crafted checkpoint names would run as this one."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def pickled_model_dir(model_dir: str | Path, folder: Path, sentinel: Path) -> Path:
    """A copy of the transformers ALBERT folder `model_dir` (config and tokenizer files) in `folder`,
    its weights a pytorch_model.bin that also holds a Sentinel for `sentinel`."""
    model_dir = Path(model_dir)
    folder.mkdir(parents=True)
    for name in ("config.json", "spiece.model", "tokenizer_config.json"):
        if (model_dir / name).exists():
            shutil.copy(model_dir / name, folder / name)
    state = load_file(str(model_dir / "model.safetensors"))
    torch.save({**state, "extra": Sentinel(sentinel)}, folder / "pytorch_model.bin")
    return folder
