"""The models of a multiplexed `albert-ray serve`: `--model NAME=DIR` (repeated) and `--models DIR`
(each sub-folder holding a config.json is a model named by the folder), their names checked before
any folder is read; with `--backend onnx` each model's export, `--onnx NAME=FILE`; and every model
read and checked (served_model.read_model) before Ray starts."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from ..errors import BadInput, MissingInput
from ..stages.serve_embed import EMBED
from ..stages.serve_options import ServeOptions
from ..stages.served_model import ServedModel, read_model
from ..storage import exists, join, list_names

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A model's name: one URL path segment as it is written (no escaping, never `.` or `..`), and an
HTTP header value."""
EMBED_EXAMPLE = json.dumps({"text": "..."})
"""The body of the start-up lines' example embedding request."""
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
    if not exists(folder):
        raise MissingInput(f"--models: {folder} does not exist")
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


def onnx_files(flags: Sequence[str], folders: dict[str, str], several: bool) -> dict[str, tuple[str, str]]:
    """--backend onnx: each model's ONNX export, by name, and the flag its errors name. One model
    (MODEL_DIR, named ''): one `--onnx FILE`. Several: `--onnx NAME=FILE` for every model, no other.
    The files are named, never looked for in the folders (the export does not write there)."""
    if not several:
        if len(flags) != 1:
            raise BadInput(
                "--backend onnx runs an ONNX file: give it as --onnx FILE (and --onnx only with it)"
                if not flags
                else f"--onnx {flags[1]}: one model (MODEL_DIR) runs one --onnx FILE"
            )
        return {"": (flags[0], "--onnx")}
    given: dict[str, tuple[str, str]] = {}
    for text in flags:
        name, sep, path = text.partition("=")
        if not sep or not path:
            raise BadInput(f"--onnx {text}: NAME=FILE is expected with several models (a model's name, its export)")
        if name not in folders:
            raise BadInput(f"--onnx {text}: no model is named {name!r} (models: {', '.join(folders)})")
        if name in given:
            raise BadInput(f"--onnx {text}: model {name!r} has its --onnx already ({given[name][0]})")
        given[name] = (path, f"model {name} --onnx")
    for name, folder in folders.items():
        if name not in given:
            raise BadInput(
                f"--backend onnx: model {name!r} has no --onnx {name}=FILE (every model runs its own export: "
                f"`albert-ray export onnx {folder} FILE [--quantize int8]`)"
            )
    return given


def read_models(
    folders: dict[str, str],
    onnx: dict[str, tuple[str, str]],
    max_seq_length: int | None,
    exit_patience: int | None,
    exit_entropy: float | None,
) -> dict[str, ServedModel]:
    """Every model (by name; MODEL_DIR alone named ''), read and checked with its ONNX export where
    `onnx` gives one (onnx_files): a failure is one line naming the model (`model NAME: ...`)."""
    return {
        name: read_model(
            folder,
            max_seq_length,
            onnx[name][0] if name in onnx else None,
            exit_patience,
            exit_entropy,
            key=f"model {name}" if name else "MODEL_DIR",
            onnx_key=onnx[name][1] if name in onnx else "--onnx",
        )
        for name, folder in folders.items()
    }


def summary(model: ServedModel) -> str:
    """The served model in words: its family and labels (or that it embeds only), and its length."""
    if not model.predicts:
        encoder = "an encoder without a task head" if model.kind is None else f"the encoder of a {model.kind} model"
        return f"{encoder}: sentence vectors only; {model.max_seq_length} tokens"
    labels = f": {', '.join(model.labels)}" if model.labels else ""
    return f"{model.kind}{labels}; {model.max_seq_length} tokens"


def per_replica(options: ServeOptions) -> str:
    """'2 threads a replica': what each replica computes on (ServeOptions.threads)."""
    return f"{options.threads} thread{'s' * (options.threads != 1)} a replica"


def curl(url: str, model: ServedModel) -> str:
    """An example request to the model at `url`."""
    example = json.dumps(dict.fromkeys(model.required, "..."))
    optional = [f for f in model.fields if f not in model.required]
    line = f"  curl -s {url} -H 'Content-Type: application/json' -d '{example}'"
    return line + (f"    # and {', '.join(optional)}" if optional else "")


def serving_lines(
    url: str,
    options: ServeOptions,
    folders: dict[str, str],
    models: dict[str, ServedModel],
    onnx: dict[str, tuple[str, str]],
) -> str:
    """What the command prints once the endpoint is up: the models (MODEL_DIR alone, named '', or
    several by name), what runs each, and example requests for what they answer."""
    run = {name: f"; onnxruntime on {onnx[name][0]}" if name in onnx else "" for name in models}
    if "" in models:
        model, lines = models[""], []
        lines.append(f"serving {folders['']} ({summary(model)}{run['']}; {per_replica(options)}) at {url}")
        if model.predicts:
            lines.append(curl(url, model))
        if model.embeds:
            lines.append(f"  curl -s {url}{EMBED} -d '{EMBED_EXAMPLE}'    # a sentence vector (and pooling, normalize)")
        lines.append(f"  curl -s {url}    # the model's family, fields, labels, max_seq_length and embedding_dimension")
        return "\n".join([*lines, "Ctrl-C stops it."])
    lines = [
        f"serving {len(models)} models at {url}/<name> (up to {options.models_per_replica} loaded "
        f"per replica, each on first use; {per_replica(options)}):",
        *(f"  {name}: {folders[name]} ({summary(m)}{run[name]})" for name, m in models.items()),
    ]
    head = next((name for name, m in models.items() if m.predicts), None)  # a model that predicts
    if head is not None:
        lines.append(curl(f"{url}/{head}", models[head]))
    embeds = next((name for name, m in models.items() if m.embeds), None)
    if embeds is not None:
        lines.append(f"  curl -s {url}/{embeds}{EMBED} -d '{EMBED_EXAMPLE}'    # a sentence vector")
    lines.append(f"  curl -s {url}    # the models, and which the replica that answers has loaded")
    return "\n".join([*lines, "Ctrl-C stops it."])


__all__ = [
    "NAME",
    "RESERVED",
    "check_name",
    "model_flag",
    "models_in",
    "named_models",
    "onnx_files",
    "read_models",
    "serving_lines",
]
