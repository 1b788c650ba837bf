"""LAMB as in the ALBERT paper's code: Adam moments without bias correction, then a layer-wise trust
ratio ||w|| / ||update||. Norms are of the full parameters even when FSDP2 shards them (DTensor).

Three implementations of one step, the same arithmetic:
- fused (CUDA, the default there): three Triton kernels per parameter group
  (pipelines/train/fused_lamb.py), 40 bytes of memory traffic per parameter;
- multi-tensor (torch._foreach_*, the default elsewhere): a dozen passes per group, the trust
  ratios on the device, the squared norms of sharded parameters summed in one all-reduce;
- per tensor (`foreach=False`): the reference the tests and bench/gpu_suite.py compare with.

`step(apply=flag)` takes a one-element device tensor: 0 leaves parameters and moments as they were.
The fused step decides that on the device (training health skips a non-finite step without a host
read); the others read the flag on the host.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor

from . import fused_lamb
from .distributed import full_norms, local_tensor, shard_groups, sum_over_groups


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
        fused: bool | None = None,
    ):
        """`fused`: the Triton step; None = where it can run (CUDA, fp32 contiguous tensors)."""
        if lr < 0 or eps <= 0 or not 0 <= betas[0] < 1 or not 0 <= betas[1] < 1:
            raise ValueError(f"Lamb: bad hyperparameters lr={lr}, betas={betas}, eps={eps}")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt, foreach=foreach)
        super().__init__(params, defaults)
        self.fused = fused
        self._layouts: dict[int, dict] = {}  # per group: the fused step's block table
        self._always: dict[torch.device, torch.Tensor] = {}

    @torch.no_grad()
    def step(self, closure=None, apply: torch.Tensor | None = None):
        """One step; with `apply` (a one-element device tensor), only where it is nonzero."""
        loss = closure() if closure is not None else None
        groups = []
        for index, group in enumerate(self.param_groups):
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
            if params:
                groups.append((index, group, params))
        fused = [self._fusable(params) for _, _, params in groups]
        if apply is not None and not all(fused) and not bool(apply.item()):
            return loss  # a host read of the flag: the steps that are not fused cannot skip on the device
        for (index, group, params), use_fused in zip(groups, fused):
            if use_fused:
                self._fused(index, group, params, apply)
            else:
                (self._multi_tensor if group.get("foreach", True) else self._per_tensor)(group, params)
        return loss

    def _fusable(self, params: list[torch.Tensor]) -> bool:
        if self.fused is False:
            return False
        tensors = [local_tensor(t) for p in params for t in (p, p.grad)]
        ok = fused_lamb.usable(tensors)
        if self.fused and not ok:
            raise ValueError("Lamb(fused=True) needs Triton and fp32 contiguous parameters and gradients on a GPU")
        return ok

    def _fused(self, index: int, group: dict, params: list[torch.Tensor], apply: torch.Tensor | None) -> None:
        beta1, beta2 = group["betas"]
        device = local_tensor(params[0]).device
        if apply is None:  # one "apply" flag per device, kept: no fill kernel per step
            if device not in self._always:
                self._always[device] = torch.ones(1, dtype=torch.int32, device=device)
            apply = self._always[device]
        groups = shard_groups(params)
        fused_lamb.lamb_step(
            [local_tensor(p) for p in params],
            [local_tensor(p.grad) for p in params],
            [local_tensor(self.state[p]["exp_avg"]) for p in params],
            [local_tensor(self.state[p]["exp_avg_sq"]) for p in params],
            lr=group["lr"],
            beta1=beta1,
            beta2=beta2,
            eps=group["eps"],
            weight_decay=group["weight_decay"],
            adapt=group["adapt"],
            apply=apply.to(torch.int32).reshape(1),
            reduce_squares=lambda squares: sum_over_groups(squares, groups),
            cache=self._layouts.setdefault(index, {}),
        )

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
