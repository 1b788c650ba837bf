"""One optimizer step over a global batch: accumulate micro-batches, clip, LAMB/AdamW, schedule.

Losses are normalised by the global batch's totals (masked-LM weight and sequences, summed over
micro-batches and ranks) before backward, so 1 worker, N workers and any gradient accumulation
compute the same gradient as one big batch would. Every count and sum stays on the device
(all-reduced there: NCCL takes no host tensors) and the step never waits for the device: its
metrics are read when the loop logs them (`PendingMetrics.get`), so the host queues the next step
while the device runs this one. Training health's skip of a non-finite step (`guard`) is decided
on the device too, where the optimizer can take the decision there (the fused LAMB, torch's fused
AdamW); a `check` on the host before the update (spike policies skip and rollback) reads the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.distributed.tensor.experimental import implicit_replication

from albert_model.losses import pretraining_sums

from .distributed import all_reduce_sum, full_norms, local_tensor, shard_groups, world_size
from .lamb import Lamb


@dataclass
class StepMetrics:
    loss: float
    mlm_loss: float
    sop_loss: float | None  # None without a sentence objective (data.sentence_objective=none)
    mlm_accuracy: float
    sop_accuracy: float | None
    grad_norm: float
    lr: float
    sequences: int
    tokens: int  # real (unpadded) tokens
    mlm_weight: float  # masked positions predicted


class PendingMetrics:
    """A step's metrics, still on the device until `get` reads them. On a GPU they are copied to
    pinned host memory as soon as the step computes them (no wait), and `get` waits for that copy
    alone: a plain read (`.tolist()`) would queue behind every kernel already queued, the next
    step's too, and so wait for the device to run out of work."""

    def __init__(self, values: torch.Tensor, lr: float, sentence: bool = True):
        """`sentence`: the batches had sentence labels (else the SOP figures are None)."""
        self.values, self.lr, self.sentence = values, lr, sentence
        self.read: StepMetrics | None = None
        self._host, self._copied = values, None
        if values.is_cuda:
            self._host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self._host.copy_(values, non_blocking=True)
            self._copied = torch.cuda.Event()
            self._copied.record()

    def get(self) -> StepMetrics:
        """The metrics, read once (training health reads them before the update or one step
        later, the metrics window again when it logs)."""
        if self.read is None:
            if self._copied is not None:
                self._copied.synchronize()
            self.read = self._read()
        return self.read

    def _read(self) -> StepMetrics:
        mlm_ce, sop_ce, mlm_correct, sop_correct, mlm_weight, sequences, tokens, norm = self._host.tolist()
        mlm_loss, sop_loss = mlm_ce / (mlm_weight + 1e-5), sop_ce / sequences
        return StepMetrics(
            loss=mlm_loss + sop_loss,
            mlm_loss=mlm_loss,
            sop_loss=sop_loss if self.sentence else None,
            mlm_accuracy=mlm_correct / max(mlm_weight, 1.0),
            sop_accuracy=sop_correct / sequences if self.sentence else None,
            grad_norm=norm,
            lr=self.lr,
            sequences=int(sequences),
            tokens=int(tokens),
            mlm_weight=mlm_weight,
        )


def clip_gradients(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_'s arithmetic (scale by max_norm / (norm + 1e-6) where that is
    below 1) on the local shards: one multi-tensor norm, one all-reduce per mesh, one multi-tensor
    scale, instead of DTensor's per-operation dispatch. Returns the total norm, on the device."""
    grads = [p.grad for p in parameters if p.grad is not None]
    total = full_norms(grads, shard_groups(grads)).pow(2).sum().sqrt()
    scale = (max_norm / (total + 1e-6)).clamp(max=1.0)
    torch._foreach_mul_([local_tensor(g) for g in grads], scale)
    return total


def _set_gradient_sync(model: torch.nn.Module, enabled: bool) -> None:
    """FSDP2 modules can skip the reduce-scatter on all but the last micro-batch."""
    if hasattr(model, "set_requires_gradient_sync"):
        model.set_requires_gradient_sync(enabled)


def _counts(mb: dict[str, torch.Tensor | None]) -> torch.Tensor:
    """(masked-LM weight, sequences, real tokens) of a micro-batch, on its device (the sizes are
    filled there: a tensor made from a host number would be a copy that may wait for the device)."""
    ids, mask = mb["input_ids"], mb["attention_mask"]
    tokens = ids.new_full((), ids.numel(), dtype=torch.float64) if mask is None else mask.sum(dtype=torch.float64)
    sequences = ids.new_full((), len(ids), dtype=torch.float64)
    return torch.stack([mb["masked_lm_weights"].sum(dtype=torch.float64), sequences, tokens])


def finite_step(values: torch.Tensor) -> torch.Tensor:
    """On the device: the step's loss and gradient norm (PendingMetrics' values) are both finite,
    with the arithmetic of StepMetrics' loss, so the host's later reading agrees."""
    mlm_ce, sop_ce, _, _, mlm_weight, sequences, _, norm = values.unbind()
    loss = mlm_ce / (mlm_weight + 1e-5) + sop_ce / sequences
    return torch.isfinite(loss) & torch.isfinite(norm)


def optimizer_step(optimizer: torch.optim.Optimizer, apply: torch.Tensor) -> None:
    """optimizer.step() where the device flag `apply` is true, decided on the device by the
    optimizers that can (our LAMB; torch's fused Adam/AdamW through their `found_inf`, as GradScaler
    uses it); any other reads the flag on the host."""
    if isinstance(optimizer, Lamb):
        optimizer.step(apply=apply)
    elif getattr(optimizer, "_step_supports_amp_scaling", False) and optimizer.defaults.get("fused"):
        optimizer.found_inf = (~apply).float().reshape(())
        try:
            with implicit_replication():  # the flag is a plain tensor beside FSDP2's DTensor parameters
                optimizer.step()
        finally:
            del optimizer.found_inf
    elif bool(apply.item()):
        optimizer.step()


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    micro_batches: list[dict[str, torch.Tensor | None]],
    max_grad_norm: float,
    check: Callable[[StepMetrics], bool] | None = None,
    guard: bool = False,
    skip: bool = False,
) -> PendingMetrics:
    """Micro-batches on the model's device; `attention_mask` None means no padding.

    Training health, in one of two ways (the metrics are all-reduced, so every rank decides alike;
    a step not applied drops its gradients, the optimizer does not step and the schedule moves on):
    - `guard`: a step whose loss or gradient norm is not finite is not applied, decided on the
      device (the host reads the step later, when the loop checks it); `skip`: this step is not
      applied (known ahead: a batch skipped after a rollback);
    - `check`: reads the step's metrics before the update (one host read: the host waits for the
      device) and says whether to apply it."""
    world = world_size()
    totals = all_reduce_sum(torch.stack([_counts(mb) for mb in micro_batches]).sum(0))
    mlm_weight, sequences = totals[0].float() + 1e-5, totals[1].float()
    sums = []  # per micro-batch: mlm_ce, sop_ce, mlm_correct, sop_correct
    for i, mb in enumerate(micro_batches):
        _set_gradient_sync(model, i == len(micro_batches) - 1)
        out = model(mb["input_ids"], mb["token_type_ids"], mb["attention_mask"], mb["masked_positions"])
        s = pretraining_sums(
            out.mlm_logits, out.sop_logits, mb["masked_lm_ids"], mb["masked_lm_weights"], mb.get("sentence_order_label")
        )
        mlm_ce, sop_ce = s.mlm_ce, s.sop_ce
        loss = mlm_ce / mlm_weight + sop_ce / sequences
        # FSDP averages gradients over ranks; the global normalisers above already did.
        (loss * world).backward()
        sums.append(torch.stack([mlm_ce.detach(), sop_ce.detach(), s.mlm_correct, s.sop_correct]).double())
    grad_norm = clip_gradients(model.parameters(), max_grad_norm)
    lr = optimizer.param_groups[0]["lr"]
    summed = all_reduce_sum(torch.stack(sums).sum(0))
    sentence = "sentence_order_label" in micro_batches[0]
    pending = PendingMetrics(torch.cat([summed, totals, grad_norm.detach().double().reshape(1)]), lr, sentence)
    if check is not None:
        if check(pending.get()):
            optimizer.step()
    elif guard and not skip:
        optimizer_step(optimizer, finite_step(pending.values))
    elif not skip:
        optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return pending
