"""The fine-tuning model, optimizer and schedule, and one epoch of training or prediction.

Pure PyTorch. Under DDP each worker takes every `world`-th example of each global batch and
scales its loss so that the averaged gradient is the global batch's mean; without a process
group (`world == 1`) it is plain single-process training. On a GPU the host never waits for the
device inside an epoch: batches go over from pinned memory without blocking, and the loss is
summed on the device and read once at the end.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from albert_model import kernels
from albert_model.config import AlbertConfig
from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertModel

from ..config.sections import resolved_precision
from ..storage.models import read_model_config
from ..train.loader import to_device
from .tokenizer import pad_batch

Encoded = Sequence[tuple[Sequence[int], Sequence[int]]]
LossSum = Callable[[Any, torch.Tensor], torch.Tensor]
"""A family's loss: (the model's outputs for a batch, its targets) -> the batch's summed loss."""


def build_model(
    directory: str, model_class: type[nn.Module], num_labels: int, dropout: float, init: str, seed: int
) -> nn.Module:
    """The pretrained directory's architecture with a fresh task head (`model_class`: a family's);
    `init="random"` re-initialises the encoder too (the no-pretraining baseline under the same budget)."""
    config = AlbertConfig.from_hf_dict(read_model_config(directory, "finetune.pretrained"))
    config = config.replace(num_labels=num_labels, classifier_dropout_prob=dropout)
    torch.manual_seed(seed)
    model = model_class(config)
    if init == "pretrained":
        encoder = load_hf_pretrained(directory, AlbertModel).state_dict()
        if model.albert.pooler is None:  # a head that reads every position (QA) has no pooler
            encoder = {k: v for k, v in encoder.items() if not k.startswith("pooler.")}
        model.albert.load_state_dict(encoder)
    return model


def apply_checkpoint_weights(model: nn.Module, directory: str) -> None:
    """Every weight of a transformers export of `model`'s own head class (a trial's epoch checkpoint,
    as save_model writes it) into `model`, the fine-tuned task head included: what a resumed trial
    continues from. A checkpoint of another architecture or head fails on the first unlike weight."""
    model.load_state_dict(load_hf_pretrained(directory, type(model)).state_dict())


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


def resolve_precision(precision: str, device: torch.device) -> str:
    """finetune.precision with auto resolved for `device` (the rule pretraining follows too)."""
    return resolved_precision(precision, device.type == "cuda")


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast (the weights and the optimizer stay fp32), or nothing for fp32."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def collate(
    encoded: Encoded,
    indices: Sequence[int],
    pad_id: int,
    targets: torch.Tensor | None = None,
    pin: bool = False,
    widths: Sequence[int] = (),
) -> dict[str, torch.Tensor]:
    """The examples at `indices` as a host batch: pad_batch's columns (padded to one of `widths`
    where one holds them) and, given targets, `labels`. Pinned (for a GPU), the copy to the device
    does not block the host."""
    batch = {k: torch.from_numpy(v) for k, v in pad_batch([encoded[i] for i in indices], pad_id, widths).items()}
    if targets is not None:
        batch["labels"] = targets[torch.as_tensor(indices, dtype=torch.long)]
    return {k: v.pin_memory() for k, v in batch.items()} if pin else batch


Collate = Callable[..., dict[str, torch.Tensor]]
"""`collate`'s signature: (encoded, indices, pad_id, targets=None, pin=False, widths=()) -> a host batch."""


GRAPH_WIDTHS = 4
"""finetune.cuda_graphs pads each batch to one of this many widths (a graph is captured per width)."""


def graph_widths(max_seq_length: int, count: int = GRAPH_WIDTHS) -> tuple[int, ...]:
    """`count` widths evenly spaced up to max_seq_length, each rounded up to a multiple of 8 (the
    matrix units' tile) and none beyond max_seq_length: 32, 64, 96, 128 at 128."""
    widths = set()
    for i in range(1, count + 1):
        even = -(-max_seq_length * i // count)  # the ceiling of max_seq_length * i / count
        widths.add(min(max_seq_length, -(-even // 8) * 8))
    return tuple(sorted(widths))


class GraphedModel(nn.Module):
    """finetune.cuda_graphs: the model compiled whole and replayed as CUDA graphs (torch.compile's
    mode="reduce-overhead": its forward and its backward each one graph launch instead of a launch
    per kernel), for the full training batches. Any other batch (an epoch's last, smaller one) runs
    the same model eagerly instead of capturing a graph it would replay once an epoch. A graph is
    captured per width: batches are padded to graph_widths."""

    def __init__(self, model: nn.Module, batch_size: int):
        super().__init__()
        self.model, self.batch_size = model, batch_size
        self.compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)

    def forward(self, input_ids: torch.Tensor, **inputs: torch.Tensor) -> torch.Tensor:
        if len(input_ids) != self.batch_size:
            return self.model(input_ids, **inputs)
        torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are no longer read
        return self.compiled(input_ids, **inputs)


def finetune_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule,
    batch: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]],
    global_batch_size: int,
    max_grad_norm: float,
    loss_of: LossSum,
    device: torch.device,
    precision: str = "fp32",
    world: int = 1,
) -> torch.Tensor:
    """One optimizer step on this worker's share of a global batch: a host batch from `collate`
    (with labels), or its micro-batches (finetune.grad_accum_steps: their gradients add up before
    the step, only the last one synchronised across workers). Returns the share's summed loss
    (`loss_of` the outputs), left on the device."""
    micro_batches = batch if isinstance(batch, list) else [batch]
    total = None
    for i, micro in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            inputs = to_device(micro, device)
            targets = inputs.pop("labels")
            with autocast(precision, device):
                outputs = model(**inputs)
            loss_sum = loss_of(outputs, targets)
            # DDP averages gradients over workers: scale so the result is the global batch's mean.
            (loss_sum * world / global_batch_size).backward()
        total = loss_sum.detach() if total is None else total + loss_sum.detach()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    schedule.step()
    optimizer.zero_grad(set_to_none=True)
    return total


def train_epoch(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    schedule,
    encoded: Encoded,
    targets: torch.Tensor,
    batches: list[np.ndarray],
    pad_id: int,
    max_grad_norm: float,
    loss_of: LossSum,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
    precision: str = "fp32",
    widths: Sequence[int] = (),
    collate_fn: Collate | None = None,
    accumulation: int = 1,
) -> float:
    """One pass over `batches`; returns the mean training loss over all workers' examples. `targets`
    has a row per example. Batches are padded to one of `widths` where one holds them
    (finetune.cuda_graphs). `collate_fn` is the family's (`collate` by default). Each worker's share
    of a batch is cut into `accumulation` micro-batches (finetune.grad_accum_steps)."""
    collate_fn = collate_fn or collate
    device = device or torch.device("cpu")
    model.train()
    pin = device.type == "cuda"
    total, seen = torch.zeros((), dtype=torch.float64, device=device), 0
    for batch in batches:
        parts = [p for p in np.array_split(batch[rank::world], accumulation) if len(p)]
        share = [collate_fn(encoded, part, pad_id, targets, pin, widths) for part in parts]
        total += finetune_step(
            model, optimizer, schedule, share, len(batch), max_grad_norm, loss_of, device, precision, world
        )
        seen += len(batch)
    if world > 1:
        dist.all_reduce(total)
    return float(total) / max(1, seen)  # the epoch's one read of the device


def example_width(example: Any) -> int:
    """An example's tokens: its sequence's, or (multiple choice: a list of (ids, types) per choice,
    every choice of a batch padded to one width) its longest choice's."""
    first = example[0]
    if len(first) and not isinstance(first[0], (int, np.integer)):
        return max(len(ids) for ids, _ in example)
    return len(first)


def example_tokens(example: Any) -> int:
    """The tokens an example occupies in a batch padded to its width: its width, times its choices
    (multiple choice: each choice is a sequence of the batch)."""
    first = example[0]
    choices = len(example) if len(first) and not isinstance(first[0], (int, np.integer)) else 1
    return choices * example_width(example)


def length_batches(tokens: Sequence[int], max_rows: int, max_tokens: int | None = None) -> list[slice]:
    """Consecutive runs of examples (in the order given: by width, so that a run pads to its own
    widest) of at most `max_rows`, and, with `max_tokens`, of at most that many padded tokens: rows
    times the run's widest `tokens`, so one long example does not pad many short ones to its width
    (text-embeddings-inference's max_batch_tokens). An example over the budget alone is a run."""
    runs: list[slice] = []
    start, widest = 0, 0
    for i, n in enumerate(tokens):
        widest = max(widest, n)
        if i - start + 1 > max_rows or (max_tokens is not None and (i - start + 1) * widest > max_tokens and i > start):
            runs.append(slice(start, i))
            start, widest = i, n
    if len(tokens):
        runs.append(slice(start, len(tokens)))
    return runs


@torch.no_grad()
def predict(
    model: nn.Module,
    encoded: Encoded,
    batch_size: int,
    pad_id: int,
    rank: int = 0,
    world: int = 1,
    device: torch.device | None = None,
    precision: str = "fp32",
    scores_of: Callable[[Any], torch.Tensor] = lambda outputs: outputs,
    collate_fn: Collate | None = None,
    max_tokens: int | None = None,
) -> np.ndarray:
    """`scores_of` the model's outputs for every example, in order ([N, ...]: logits [N, num_labels]
    by default); workers share the work and gather. Scores with a sequence dimension ([B, S, ...])
    are zero-padded to the widest batch's S. `collate_fn` is the family's (`collate` by default).
    A batch holds up to `batch_size` examples and, with `max_tokens`, up to that many padded tokens
    (length_batches)."""
    device = device or torch.device("cpu")
    collate_fn = collate_fn or collate
    model.eval()
    mine = np.arange(len(encoded))[rank::world]
    mine = mine[np.argsort([example_width(encoded[i]) for i in mine], kind="stable")]  # less padding
    batches = [mine[run] for run in length_batches([example_tokens(encoded[i]) for i in mine], batch_size, max_tokens)]
    pin = device.type == "cuda"
    with autocast(precision, device), kernels.inference_attention(device):
        outputs = [
            scores_of(model(**to_device(collate_fn(encoded, batch, pad_id, pin=pin), device))).float().cpu().numpy()
            for batch in batches
        ]
    parts = list(zip(batches, outputs))
    if world > 1:
        gathered: list = [None] * world
        dist.all_gather_object(gathered, parts)
        parts = [part for worker in gathered for part in worker]
    shape = np.max([part.shape[1:] for _, part in parts], axis=0)
    scores = np.zeros((len(encoded), *shape), np.float32)
    for indices, part in parts:
        scores[(indices, *(slice(0, n) for n in part.shape[1:]))] = part
    return scores


__all__ = [
    "apply_checkpoint_weights",
    "autocast",
    "build_model",
    "build_schedule",
    "collate",
    "epoch_batches",
    "example_tokens",
    "example_width",
    "finetune_step",
    "graph_widths",
    "GraphedModel",
    "length_batches",
    "predict",
    "resolve_precision",
    "steps_per_epoch",
    "train_epoch",
]
