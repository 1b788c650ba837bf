"""The models of a multiplexed `albert-ray serve`: `--model NAME=DIR` (repeated) and `--models DIR`
(each sub-folder holding a config.json is a model named by the folder), their names checked before
any folder is read."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import BadInput, MissingInput
from ..storage import exists, join, list_names

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A model's name: one URL path segment as it is written (no escaping, never `.` or `..`), and an
HTTP header value."""
RESERVED = ("health", "embed")
"""Names the endpoint's own routes take (`<route>/health`, `<route>/embed` with Serve's header)."""


def check_name(name: str, source: str) -> str:
    """`name`, or BadInput naming it and where it came from (`source`)."""
    if not NAME.fullmatch(name):
        raise BadInput(
            f"{source}: model name {name!r} is not URL-safe (1 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit)"
        )
    if name in RESERVED:
        raise BadInput(f"{source}: model name {name!r} is taken by the endpoint's <route>/{name}")
    return name


def model_flag(text: str) -> tuple[str, str]:
    """One `--model NAME=DIR`: (name, folder)."""
    name, sep, folder = text.partition("=")
    if not sep or not folder:
        raise BadInput(f"--model {text}: NAME=DIR is expected (a name for the URL, then the model folder)")
    return check_name(name, f"--model {text}"), folder


def models_in(folder: str) -> list[tuple[str, str]]:
    """(name, folder) of each sub-folder of `folder` (local or s3://) holding a config.json, by name."""
    found = [(name, join(folder, name)) for name in list_names(folder) if exists(join(folder, name, "config.json"))]
    if not found:
        raise MissingInput(f"--models: {folder} has no sub-folder holding a model (a config.json)")
    return [(check_name(name, f"--models {folder}"), path) for name, path in found]


def named_models(flags: Sequence[str], folders: Sequence[str]) -> dict[str, str]:
    """Every model by name, in the order given: each --model, then each --models folder's; a name
    given twice is BadInput naming it."""
    models: dict[str, str] = {}
    for name, folder in [model_flag(text) for text in flags] + [m for f in folders for m in models_in(f)]:
        if name in models:
            raise BadInput(f"model name {name!r}: given twice ({models[name]} and {folder})")
        models[name] = folder
    return models


__all__ = ["NAME", "RESERVED", "check_name", "model_flag", "models_in", "named_models"]
