"""One trial's training run, free of Ray: its finetune settings, the data it receives, and the
epoch loop that reports metrics and a transformers-format checkpoint after every epoch, which also
holds the training state a killed trial continues from."""

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
import torch.distributed as dist
from torch import nn

from albert_model.config import AlbertConfig

from ..config import FinetuneSection, config_to_dict
from ..errors import BadInput, ConfigError, MissingInput
from ..storage.models import ModelUsage, materialize, save_model
from ..train.build import build_optimizer
from .distill import Teacher
from .families import task_family
from .family import EncodedTask
from .loop import (
    GraphedModel,
    apply_checkpoint_weights,
    build_schedule,
    epoch_batches,
    graph_widths,
    predict,
    resolve_precision,
    steps_per_epoch,
    train_epoch,
)
from .objective import build_objective
from .tokenizer import PairTokenizer


@dataclass
class TrialData:
    """What every trial receives (once, through the object store): the encoded task and the
    pretrained directory's files, so trials on any node need no shared filesystem."""

    task: str
    """finetune.task: the family that made `encoded` and evaluates it."""
    encoded: EncodedTask
    pad_id: int
    pretrained_files: dict[str, bytes]
    teacher: Teacher | None = None
    """Distilling: the teacher's outputs and the student's settings (pretrained_files are the teacher's)."""


def trial_finetune(base: FinetuneSection, overrides: dict[str, Any]) -> FinetuneSection:
    """`base` with a trial's `finetune.KEY: value` draws applied, validated as on the command line."""
    values = config_to_dict(base)
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section != "finetune" or name not in values:
            raise ValueError(f"search space key {key!r} is not a finetune key")
        values[name] = value.item() if isinstance(value, np.generic) else value
    return dataclasses.replace(base, **values)


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


PREDICTIONS = "predictions"
"""The folder of a checkpoint that holds its evaluation's predictions files (the family's)."""


def write_predictions(files: dict[str, str], directory: str) -> None:
    """A family's predictions files (name -> text) into `directory`, made only when there are some."""
    if files:
        os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)


TRAINER_STATE = "trainer_state.pt"
"""The file of an epoch checkpoint that holds what continuing the trial needs besides its weights:
{"epochs": the epochs done, "optimizer" and "schedule": their state dicts, "rng": each worker's
rng_state in rank order}. Tensors, numbers, lists and dicts only: read with weights_only=True."""

EXPORT_SKIPS = (TRAINER_STATE,)
"""The files of an epoch checkpoint that are training state only: left out of the exported model."""


def rng_state(device: torch.device) -> dict[str, torch.Tensor]:
    """torch's CPU generator's state and, on a GPU, `device`'s: what dropout draws from. The
    epochs' order needs none: epoch_batches is seeded by (seed, epoch)."""
    state = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict[str, torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state["cpu"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


def worker_rng_states(device: torch.device, world: int) -> list[dict[str, torch.Tensor]]:
    """Every worker's rng_state in rank order, on every worker: under DDP each draws dropout for its
    own share of the batches, so the generators drift apart."""
    if world == 1:
        return [rng_state(device)]
    states: list = [None] * world
    dist.all_gather_object(states, rng_state(device))
    return states


def save_trainer_state(
    directory: str,
    epochs: int,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    rng_states: list[dict[str, torch.Tensor]],
) -> None:
    state = {"epochs": epochs, "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict()}
    torch.save({**state, "rng": rng_states}, os.path.join(directory, TRAINER_STATE))


def read_trainer_state(checkpoint: str) -> dict[str, Any]:
    """A checkpoint's TRAINER_STATE. Without one (a checkpoint this loop did not write) the trial
    fails rather than start over: its epochs would be reported a second time under the same trial,
    and weights alone, with a fresh optimizer and schedule, would not continue the run it configures."""
    path = os.path.join(checkpoint, TRAINER_STATE)
    if not os.path.exists(path):
        raise MissingInput(f"{checkpoint}: no {TRAINER_STATE}, the training state a trial resumes from")
    return torch.load(path, map_location="cpu", weights_only=True)


def restore_trainer_state(
    state: dict[str, Any],
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    rank: int,
    world: int,
    device: torch.device,
) -> None:
    """The optimizer, the schedule and this worker's generators as the checkpoint left them. The
    optimizer is loaded after the schedule's construction, which sets the lr to its first step's:
    the loaded param groups carry the checkpoint's lr, that the schedule's state does not set."""
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    rng = state["rng"]
    # Resumed with another worker count, the shares differ anyway: every worker takes rank 0's.
    set_rng_state(rng[rank] if len(rng) == world else rng[0], device)


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
    resume_from: str | None = None,
) -> None:
    """Train for cfg.epochs, calling `report(metrics, checkpoint_dir)` after each epoch on every
    worker (the checkpoint only from rank 0). `wrap` is DDP under Ray Train. `resume_from`, a local
    epoch checkpoint of this trial (every worker reads its own copy), continues after that epoch:
    its weights and TRAINER_STATE are loaded and the next epochs are the uninterrupted run's."""
    device = device or torch.device("cpu")
    family, task = task_family(data.task), data.encoded
    state = read_trainer_state(resume_from) if resume_from is not None else None
    done = state["epochs"] if state is not None else 0
    if done >= cfg.epochs:
        # A finished trial (killed between its last report and its end) has nothing left to do. It
        # reports nothing: Tune keeps the last result and checkpoint it had, and a re-report would
        # count as one more iteration of an epoch already seen.
        return
    precision = resolve_precision(cfg.precision, device)
    objective = build_objective(cfg, family, task, pretrained_dir, data.teacher)
    model = objective.model
    if resume_from is not None:
        apply_checkpoint_weights(model, resume_from)
    objective.trained.to(device)
    if cfg.compile:
        from ..train.parallel import apply_compile  # here: FSDP's imports cost every other trial ~0.4 s

        apply_compile(model)
    graphs = cfg.cuda_graphs and device.type == "cuda"
    if graphs and world > 1:
        raise ValueError("finetune.cuda_graphs needs one worker per trial")
    trained = GraphedModel(objective.trained, cfg.batch_size) if graphs else wrap(objective.trained)
    widths = graph_widths(cfg.max_seq_length) if graphs else ()
    optimizer = build_optimizer(trained, "adamw", cfg.lr, cfg.weight_decay)
    schedule = build_schedule(
        optimizer, cfg.epochs * steps_per_epoch(len(task.train), cfg.batch_size, world), cfg.warmup_ratio
    )
    if state is not None:
        restore_trainer_state(state, optimizer, schedule, rank, world, device)
    for epoch in range(done, cfg.epochs):
        started = time.time()
        batches = epoch_batches(len(task.train), cfg.batch_size, cfg.seed, epoch, world)
        train_loss = train_epoch(
            trained,
            optimizer,
            schedule,
            task.train,
            objective.targets,
            batches,
            data.pad_id,
            cfg.max_grad_norm,
            objective.loss_of,
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
        rng_states = worker_rng_states(device, world)  # after the evaluation, which draws nothing
        if rank == 0:
            checkpoint = os.path.join(checkpoint_root, f"epoch_{epoch + 1}")
            usage = ModelUsage(cfg.task, cfg.max_seq_length, evaluation.usage)
            save_model(model, pretrained_dir, checkpoint, task.label_names, family.problem_type, usage)
            write_predictions(evaluation.files, os.path.join(checkpoint, PREDICTIONS))
            save_trainer_state(checkpoint, epoch + 1, optimizer, schedule, rng_states)
        report(metrics, checkpoint)


__all__ = [
    "EXPORT_SKIPS",
    "TRAINER_STATE",
    "TrialData",
    "check_pretrained",
    "encode_task",
    "fit_trial",
    "PREDICTIONS",
    "trial_finetune",
]
