"""The fine-tuning model, optimizer and schedule, and one epoch of training or prediction.

Pure PyTorch. Under DDP each worker takes every `world`-th example of each global batch and
scales its loss so that the averaged gradient is the global batch's mean; without a process
group (`world == 1`) it is plain single-process training.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from albert_model.config import AlbertConfig
from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertForSequenceClassification, AlbertModel

from ..models import read_model_config
from .tokenizer import pad_batch

Encoded = Sequence[tuple[list[int], list[int]]]


def build_classifier(
    directory: str, num_labels: int, dropout: float, init: str, seed: int
) -> AlbertForSequenceClassification:
    """The pretrained directory's architecture with a fresh classifier head; `init="random"`
    re-initialises the encoder too (the no-pretraining baseline under the same budget)."""
    config = AlbertConfig.from_hf_dict(read_model_config(directory, "finetune.pretrained"))
    config = config.replace(num_labels=num_labels, classifier_dropout_prob=dropout)
    torch.manual_seed(seed)
    model = AlbertForSequenceClassification(config)
    if init == "pretrained":
        model.albert.load_state_dict(load_hf_pretrained(directory, AlbertModel).state_dict())
    return model


def build_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup from 0 over `warmup_ratio` of the steps, then linear decay to 0 at the last."""
    warmup = math.ceil(warmup_ratio * total_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, world: int = 1) -> list[np.ndarray]:
    """The epoch's seeded shuffle cut into global batches; with several workers a last batch smaller
    than the worker count is dropped (every worker needs an example)."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    return [b for b in batches if len(b) >= world]


def steps_per_epoch(n: int, batch_size: int, world: int = 1) -> int:
    return len(epoch_batches(n, batch_size, 0, 0, world))


def _tensors(encoded: Encoded, indices: Sequence[int], pad_id: int, device: torch.device) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v).to(device) for k, v in pad_batch([encoded[i] for i in indices], pad_id).items()}


def _loss_sum(logits: torch.Tensor, targets: torch.Tensor, regression: bool) -> torch.Tensor:
    if regression:
        return F.mse_loss(logits[:, 0], targets.float(), reduction="sum")
    return F.cross_entropy(logits, targets, reduction="sum")


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule,
    encoded: Encoded,
    targets: Sequence,
    batches: list[np.ndarray],
    pad_id: int,
    max_grad_norm: float,
    regression: bool,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
) -> float:
    """One pass over `batches`; returns the mean training loss over all workers' examples."""
    device = device or torch.device("cpu")
    model.train()
    target_tensor = torch.tensor(targets, dtype=torch.float32 if regression else torch.long)
    total, seen = torch.zeros((), dtype=torch.float64), 0
    for batch in batches:
        shard = batch[rank::world]
        inputs = _tensors(encoded, shard, pad_id, device)
        loss_sum = _loss_sum(model(**inputs), target_tensor[shard].to(device), regression)
        # DDP averages gradients over workers: scale so the result is the global batch's mean.
        (loss_sum * world / len(batch)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        total += loss_sum.detach().double().cpu()
        seen += len(batch)
    if world > 1:
        dist.all_reduce(total)
    return float(total) / max(1, seen)


@torch.no_grad()
def predict(
    model: nn.Module,
    encoded: Encoded,
    batch_size: int,
    pad_id: int,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
) -> np.ndarray:
    """Logits for every example, in order ([N, num_labels]); workers share the work and gather."""
    device = device or torch.device("cpu")
    model.eval()
    mine = np.arange(len(encoded))[rank::world]
    mine = mine[np.argsort([len(encoded[i][0]) for i in mine], kind="stable")]  # less padding
    outputs = [
        model(**_tensors(encoded, mine[i : i + batch_size], pad_id, device)).float().cpu().numpy()
        for i in range(0, len(mine), batch_size)
    ]
    parts = [(mine, np.concatenate(outputs) if outputs else None)]
    if world > 1:
        gathered: list = [None] * world
        dist.all_gather_object(gathered, parts[0])
        parts = gathered
    num_labels = next(p for _, p in parts if p is not None).shape[1]
    logits = np.zeros((len(encoded), num_labels), np.float32)
    for indices, part in parts:
        if part is not None:
            logits[indices] = part
    return logits


__all__ = ["build_classifier", "build_schedule", "epoch_batches", "predict", "steps_per_epoch", "train_epoch"]
