"""LAMB as in the ALBERT paper's code: Adam moments without bias correction, then a layer-wise trust
ratio ||w|| / ||update||. Norms are of the full parameters even when FSDP2 shards them (DTensor)."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

# ALBERT excludes these from weight decay and from layer adaptation.
NO_DECAY_MARKERS = ("LayerNorm", "layer_norm", "bias")


def full_norm(t: torch.Tensor) -> torch.Tensor:
    """L2 norm of the whole tensor; a sharded DTensor's shards are summed across its mesh."""
    if isinstance(t, DTensor):
        squares = t.to_local().float().pow(2).sum()
        for dim, placement in enumerate(t.placements):
            if isinstance(placement, Shard):
                dist.all_reduce(squares, group=t.device_mesh.get_group(dim))
        return squares.sqrt()
    return t.float().norm()


def parameter_groups(named_params: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float) -> list[dict]:
    """Two groups: adapted and decayed weights, and LayerNorm/bias parameters with neither."""
    decay, plain = [], []
    for name, p in named_params:
        if p.requires_grad:
            (plain if any(m in name for m in NO_DECAY_MARKERS) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay, "adapt": True},
        {"params": plain, "weight_decay": 0.0, "adapt": False},
    ]


class Lamb(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.01,
        adapt: bool = True,
    ):
        if lr < 0 or eps <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"Lamb: bad hyperparameters lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt))

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                update = m / (v.sqrt() + group["eps"])  # no bias correction, as in the original
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                ratio = 1.0
                if group["adapt"]:
                    w_norm, u_norm = full_norm(p), full_norm(update)
                    ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                    if isinstance(update, DTensor):
                        ratio = ratio.item()
                p.add_(update * ratio, alpha=-group["lr"])
        return loss
