"""LAMB as in the ALBERT paper's code: Adam moments without bias correction, then a layer-wise trust
ratio ||w|| / ||update||. Norms are of the full parameters even when FSDP2 shards them (DTensor).

The step is multi-tensor (torch._foreach_*): a handful of kernels per parameter group instead of
~10 per parameter tensor, the trust ratios stay on the device (no host sync), and the squared
norms of every sharded parameter are summed over the mesh in one all-reduce. `foreach=False`
keeps the per-tensor loop (the reference the tests and bench/gpu_suite.py compare it with).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.distributed.tensor import DTensor

from .distributed import full_norms, local_tensor, shard_groups

# ALBERT excludes these from weight decay and from layer adaptation.
NO_DECAY_MARKERS = ("LayerNorm", "layer_norm", "bias")


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
        foreach: bool = True,
    ):
        if lr < 0 or eps <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"Lamb: bad hyperparameters lr={lr}, betas={betas}, eps={eps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt, foreach=foreach)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            if params:
                (self._multi_tensor if group.get("foreach", True) else self._per_tensor)(group, params)
        return loss

    def _multi_tensor(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        weights = [local_tensor(p) for p in params]
        grads = [local_tensor(p.grad) for p in params]
        m = [local_tensor(self.state[p]["exp_avg"]) for p in params]
        v = [local_tensor(self.state[p]["exp_avg_sq"]) for p in params]
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, grads, alpha=1 - beta1)
        torch._foreach_mul_(v, beta2)
        torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
        updates = torch._foreach_sqrt(v)
        torch._foreach_add_(updates, group["eps"])
        updates = torch._foreach_div(m, updates)  # no bias correction, as in the original
        if group["weight_decay"]:
            torch._foreach_add_(updates, weights, alpha=group["weight_decay"])
        if group["adapt"]:
            groups = shard_groups(params)
            w_norm, u_norm = full_norms(params, groups), full_norms(updates, groups)
            ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
            torch._foreach_mul_(updates, list(ratio.to(updates[0].dtype).unbind()))
        torch._foreach_add_(weights, updates, alpha=-group["lr"])

    def _per_tensor(self, group: dict, params: list[torch.Tensor]) -> None:
        beta1, beta2 = group["betas"]
        for p in params:
            m, v = self.state[p]["exp_avg"], self.state[p]["exp_avg_sq"]
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            update = m / (v.sqrt() + group["eps"])  # no bias correction, as in the original
            if group["weight_decay"]:
                update.add_(p, alpha=group["weight_decay"])
            ratio = 1.0
            if group["adapt"]:
                w_norm, u_norm = full_norms([p, update], shard_groups([p, update]))
                ratio = torch.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, torch.ones_like(w_norm))
                if isinstance(update, DTensor):
                    ratio = ratio.item()
            p.add_(update * ratio, alpha=-group["lr"])
