"""One optimizer step over a global batch: accumulate micro-batches, clip, LAMB/AdamW, schedule.

Losses are normalised by the global batch's totals (masked-LM weight and sequences, summed over
micro-batches and ranks) before backward, so 1 worker, N workers and any gradient accumulation
compute the same gradient as one big batch would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.tensor import DTensor

from albert_model.losses import pretraining_sums

from .distributed import all_reduce_sum, world_size


@dataclass
class StepMetrics:
    loss: float
    mlm_loss: float
    sop_loss: float
    mlm_accuracy: float
    sop_accuracy: float
    grad_norm: float
    lr: float
    sequences: int
    tokens: int  # real (unpadded) tokens
    mlm_weight: float  # masked positions predicted


def _set_gradient_sync(model: torch.nn.Module, enabled: bool) -> None:
    """FSDP2 modules can skip the reduce-scatter on all but the last micro-batch."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(enabled)


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    micro_batches: list[dict[str, torch.Tensor]],
    max_grad_norm: float,
) -> StepMetrics:
    world = world_size()
    local = torch.tensor(
        [
            sum(float(mb["masked_lm_weights"].sum()) for mb in micro_batches),
            sum(len(mb["input_ids"]) for mb in micro_batches),
            sum(float(mb["attention_mask"].sum()) for mb in micro_batches),
        ],
        dtype=torch.float64,
    )
    mlm_weight, sequences, tokens = all_reduce_sum(local).tolist()
    sums = torch.zeros(4, dtype=torch.float64)  # mlm_ce, sop_ce, mlm_correct, sop_correct
    for i, mb in enumerate(micro_batches):
        _set_gradient_sync(model, i == len(micro_batches) - 1)
        out = model(mb["input_ids"], mb["token_type_ids"], mb["attention_mask"], mb["masked_positions"])
        s = pretraining_sums(
            out.mlm_logits, out.sop_logits, mb["masked_lm_ids"], mb["masked_lm_weights"], mb["sentence_order_label"]
        )
        loss = s.mlm_ce / (mlm_weight + 1e-5) + s.sop_ce / sequences
        # FSDP averages gradients over ranks; the global normalisers above already did.
        (loss * world).backward()
        sums += torch.stack([s.mlm_ce.detach(), s.sop_ce.detach(), s.mlm_correct, s.sop_correct]).double().cpu()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    if isinstance(grad_norm, DTensor):
        grad_norm = grad_norm.full_tensor()
    lr = optimizer.param_groups[0]["lr"]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    mlm_ce, sop_ce, mlm_correct, sop_correct = all_reduce_sum(sums).tolist()
    mlm_loss, sop_loss = mlm_ce / (mlm_weight + 1e-5), sop_ce / sequences
    return StepMetrics(
        loss=mlm_loss + sop_loss,
        mlm_loss=mlm_loss,
        sop_loss=sop_loss,
        mlm_accuracy=mlm_correct / max(mlm_weight, 1.0),
        sop_accuracy=sop_correct / sequences,
        grad_norm=float(grad_norm),
        lr=lr,
        sequences=int(sequences),
        tokens=int(tokens),
        mlm_weight=mlm_weight,
    )
