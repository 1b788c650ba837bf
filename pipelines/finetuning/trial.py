"""One trial's training run, free of Ray: its finetune settings, the data it receives, and the
epoch loop that reports metrics and a transformers-format checkpoint after every epoch."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_model.config import AlbertConfig
from albert_model.hf import save_hf_pretrained

from ..config import FinetuneSection, config_to_dict
from ..errors import BadInput, ConfigError, MissingInput
from ..storage import filesystem
from ..storage.models import require_model_dir
from ..train.build import build_optimizer
from ..train.parallel import apply_compile
from .families import task_family
from .family import EncodedTask
from .loop import (
    GraphedModel,
    build_model,
    build_schedule,
    epoch_batches,
    graph_widths,
    predict,
    resolve_precision,
    steps_per_epoch,
    train_epoch,
)
from .tokenizer import PairTokenizer

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass
class TrialData:
    """What every trial receives (once, through the object store): the encoded task and the
    pretrained directory's files, so trials on any node need no shared filesystem."""

    task: str
    """finetune.task: the family that made `encoded` and evaluates it."""
    encoded: EncodedTask
    pad_id: int
    pretrained_files: dict[str, bytes]


def trial_finetune(base: FinetuneSection, overrides: dict[str, Any]) -> FinetuneSection:
    """`base` with a trial's `finetune.KEY: value` draws applied, validated as on the command line."""
    values = config_to_dict(base)
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section != "finetune" or name not in values:
            raise ValueError(f"search space key {key!r} is not a finetune key")
        values[name] = value.item() if isinstance(value, np.generic) else value
    return dataclasses.replace(base, **values)


def read_pretrained_files(directory: str) -> dict[str, bytes]:
    """config.json, the weights (single or sharded safetensors, or pytorch_model.bin), spiece.model
    and tokenizer_config.json, local or s3://."""
    fs, root = filesystem(directory)
    require_model_dir(directory, "finetune.pretrained", "; the default {run_dir}/pretrain/hf needs the pretrain stage")
    names = {os.path.basename(p) for p in fs.ls(root, detail=False)}
    if "spiece.model" not in names:
        raise MissingInput(f"finetune.pretrained: {directory} has no spiece.model (the tokenizer)")
    wanted = [
        n
        for n in names
        if n in ("config.json", "spiece.model", "tokenizer_config.json", *WEIGHT_FILES)
        or (n.startswith("model-") and n.endswith(".safetensors"))
    ]
    return {n: fs.cat_file(f"{root}/{n}") for n in sorted(wanted)}


def check_pretrained(cfg: FinetuneSection, files: dict[str, bytes], directory: str) -> None:
    """The pretrained config.json is an ALBERT config whose position embedding covers
    finetune.max_seq_length: checked once by the driver, since every trial would fail on it."""
    try:
        model = AlbertConfig.from_hf_dict(json.loads(files["config.json"]))
    except (ValueError, TypeError, AttributeError) as e:  # JSONDecodeError is a ValueError
        raise BadInput(f"finetune.pretrained: {directory}/config.json is not an ALBERT config: {e}") from e
    if cfg.max_seq_length > model.max_position_embeddings:
        raise ConfigError(
            f"finetune.max_seq_length={cfg.max_seq_length} exceeds the pretrained model's "
            f"max_position_embeddings={model.max_position_embeddings} ({directory}/config.json); "
            f"use at most {model.max_position_embeddings}"
        )


def encode_task(cfg: FinetuneSection, files: dict[str, bytes]) -> TrialData:
    """The task read and featurized by its family with the pretrained vocabulary: what every trial
    receives, with the task's row accounting and what was truncated."""
    with tempfile.TemporaryDirectory() as local:
        tokenizer = PairTokenizer(materialize(files, local))
    return TrialData(cfg.task, task_family(cfg.task).encode(cfg, tokenizer), tokenizer.pad_id, files)


def materialize(files: dict[str, bytes], directory: str) -> str:
    """Write the pretrained directory's files to a local folder; returns it."""
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as f:
            f.write(data)
    return directory


def save_model(
    model: nn.Module,
    pretrained_dir: str,
    directory: str,
    label_names: list[str] | None,
    problem_type: str | None = None,
) -> None:
    """transformers' layout of the model's head class with the pretrained tokenizer files."""
    id2label = dict(enumerate(label_names)) if label_names is not None else None
    spiece = os.path.join(pretrained_dir, "spiece.model")
    save_hf_pretrained(model, directory, spiece_model=spiece, id2label=id2label, problem_type=problem_type)
    tokenizer_config = os.path.join(pretrained_dir, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):  # keep the pretrained casing (save_hf_pretrained assumes uncased)
        with open(tokenizer_config, "rb") as src, open(os.path.join(directory, "tokenizer_config.json"), "wb") as dst:
            dst.write(src.read())


PREDICTIONS = "predictions"
"""The folder of a checkpoint that holds its evaluation's predictions files (the family's)."""


def write_predictions(files: dict[str, str], directory: str) -> None:
    """A family's predictions files (name -> text) into `directory`, made only when there are some."""
    if files:
        os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)


Report = Callable[[dict[str, Any], "str | None"], None]


def fit_trial(
    cfg: FinetuneSection,
    data: TrialData,
    pretrained_dir: str,
    checkpoint_root: str,
    report: Report,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
    wrap: Callable[[nn.Module], nn.Module] = lambda m: m,
) -> None:
    """Train for cfg.epochs, calling `report(metrics, checkpoint_dir)` after each epoch on every
    worker (the checkpoint only from rank 0). `wrap` is DDP under Ray Train."""
    device = device or torch.device("cpu")
    family, task = task_family(data.task), data.encoded
    precision = resolve_precision(cfg.precision, device)
    model = build_model(
        pretrained_dir, family.model_class, task.num_labels, cfg.classifier_dropout, cfg.init, cfg.seed
    ).to(device)
    if cfg.compile:
        apply_compile(model)
    graphs = cfg.cuda_graphs and device.type == "cuda"
    if graphs and world > 1:
        raise ValueError("finetune.cuda_graphs needs one worker per trial")
    trained = GraphedModel(model, cfg.batch_size) if graphs else wrap(model)
    widths = graph_widths(cfg.max_seq_length) if graphs else ()
    optimizer = build_optimizer(trained, "adamw", cfg.lr, cfg.weight_decay)
    schedule = build_schedule(
        optimizer, cfg.epochs * steps_per_epoch(len(task.train), cfg.batch_size, world), cfg.warmup_ratio
    )
    targets = torch.as_tensor(task.train_targets, dtype=family.target_dtype)
    for epoch in range(cfg.epochs):
        started = time.time()
        batches = epoch_batches(len(task.train), cfg.batch_size, cfg.seed, epoch, world)
        train_loss = train_epoch(
            trained,
            optimizer,
            schedule,
            task.train,
            targets,
            batches,
            data.pad_id,
            cfg.max_grad_norm,
            family.loss_sum,
            rank,
            world,
            device,
            precision,
            widths=widths,
            collate_fn=family.collate,
            accumulation=cfg.grad_accum_steps,
        )
        # The bare model: DDP's forward would sync buffers across workers' unequal eval shards.
        scores = predict(
            model,
            task.eval,
            cfg.eval_batch_size,
            data.pad_id,
            rank,
            world,
            device,
            precision,
            family.scores,
            family.collate,
        )
        evaluation = family.evaluate(cfg, task, scores)
        metrics = {
            "epoch": epoch + 1,
            "train_loss": train_loss,
            **evaluation.metrics,
            "epoch_seconds": time.time() - started,
        }
        checkpoint = None
        if rank == 0:
            checkpoint = os.path.join(checkpoint_root, f"epoch_{epoch + 1}")
            save_model(model, pretrained_dir, checkpoint, task.label_names, family.problem_type)
            write_predictions(evaluation.files, os.path.join(checkpoint, PREDICTIONS))
        report(metrics, checkpoint)


__all__ = [
    "TrialData",
    "check_pretrained",
    "encode_task",
    "fit_trial",
    "materialize",
    "read_pretrained_files",
    "save_model",
    "PREDICTIONS",
    "trial_finetune",
]
