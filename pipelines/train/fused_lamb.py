"""LAMB's step as three Triton kernels over every tensor of a parameter group (CUDA), instead of the
~12 multi-tensor passes of pipelines/train/lamb.py's foreach step.

1. moments: per block of a tensor, m and v updated, the update u = m / (sqrt(v) + eps) + wd * w
   written over the gradient (which the step consumes), and the block's sums of w^2 and u^2;
2. norms: per tensor, its blocks' sums added in a fixed order (deterministic, no atomics), then
   all-reduced over the shard group as pipelines/train/distributed.full_norms does;
3. apply: w -= lr * trust_ratio * u.

Bytes per element: read g, m, v, w and write m, v, u (28), then read w, u and write w (12): 40
bytes, against ~108 for the foreach step (bench/gpu_suite.py times both). A device flag `apply`
skips the whole step inside the kernels, so training health can drop a non-finite step without
the host reading anything. The tensors of a launch are found through a table of their addresses
(built each step: gradients are new tensors every step); a block table maps each program to its
tensor and offset. Needs fp32, contiguous tensors on one CUDA device; `usable` says whether a group
qualifies, and Lamb falls back to the foreach step otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU builds of torch ship without Triton: the foreach step is used there
    triton = None

BLOCK = 1024
"""Elements per program of the moments and apply kernels."""
NORM_BLOCK = 256
"""Block partial sums per iteration of the norms kernel."""


def available() -> bool:
    """Triton is importable (the GPU build of torch brings it)."""
    return triton is not None


def interpreted() -> bool:
    """Triton runs the kernels on the CPU (TRITON_INTERPRET=1, the CPU tests)."""
    return available() and os.environ.get("TRITON_INTERPRET") == "1"


def usable(tensors: list[torch.Tensor]) -> bool:
    """The fused step can take these local tensors: fp32, contiguous, on one CUDA device (or on the
    CPU when Triton interprets)."""
    if not available() or not tensors:
        return False
    device = tensors[0].device
    if device.type != "cuda" and not (device.type == "cpu" and interpreted()):
        return False
    return all(t.dtype == torch.float32 and t.is_contiguous() and t.device == device for t in tensors)


if triton is not None:

    @triton.jit
    def _block(block_tensor, block_start, numels, BLOCK: tl.constexpr):
        """This program's tensor, its element offsets and their mask (from the block table)."""
        t = tl.load(block_tensor + tl.program_id(0))
        offsets = tl.load(block_start + tl.program_id(0)) + tl.arange(0, BLOCK)
        return t, offsets, offsets < tl.load(numels + t)

    @triton.jit
    def _tensor(ptrs, t):
        """Tensor t's fp32 data, from a table of addresses."""
        return tl.load(ptrs + t).to(tl.pointer_type(tl.float32))

    @triton.jit
    def _moments_kernel(
        w_ptrs, g_ptrs, m_ptrs, v_ptrs, numels, block_tensor, block_start, partials, apply_ptr,
        beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay,
        SUMS: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0)
        if tl.load(apply_ptr) == 0:
            return
        t, offsets, mask = _block(block_tensor, block_start, numels, BLOCK)
        w_ptr, g_ptr = _tensor(w_ptrs, t), _tensor(g_ptrs, t)
        m_ptr, v_ptr = _tensor(m_ptrs, t), _tensor(v_ptrs, t)
        w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
        g = tl.load(g_ptr + offsets, mask=mask, other=0.0)
        m = tl.load(m_ptr + offsets, mask=mask, other=0.0) * beta1 + g * one_minus_beta1
        v = tl.load(v_ptr + offsets, mask=mask, other=0.0) * beta2 + g * g * one_minus_beta2
        u = m / (tl.sqrt(v) + eps) + weight_decay * w  # no bias correction, as in the original
        tl.store(m_ptr + offsets, m, mask=mask)
        tl.store(v_ptr + offsets, v, mask=mask)
        tl.store(g_ptr + offsets, u, mask=mask)
        if SUMS:
            tl.store(partials + 2 * pid, tl.sum(w * w, axis=0))
            tl.store(partials + 2 * pid + 1, tl.sum(u * u, axis=0))

    @triton.jit
    def _norms_kernel(partials, first_block, num_blocks, squares, apply_ptr, NORM_BLOCK: tl.constexpr):
        t = tl.program_id(0)
        if tl.load(apply_ptr) == 0:
            return
        first = tl.load(first_block + t)
        count = tl.load(num_blocks + t)
        w_acc = tl.zeros([NORM_BLOCK], dtype=tl.float32)
        u_acc = tl.zeros([NORM_BLOCK], dtype=tl.float32)
        i = 0
        while i < count:  # a while loop: Triton's interpreter (the CPU tests) takes no loaded range bound
            index = i + tl.arange(0, NORM_BLOCK)
            mask = index < count
            w_acc += tl.load(partials + 2 * (first + index), mask=mask, other=0.0)
            u_acc += tl.load(partials + 2 * (first + index) + 1, mask=mask, other=0.0)
            i += NORM_BLOCK
        tl.store(squares + 2 * t, tl.sum(w_acc, axis=0))
        tl.store(squares + 2 * t + 1, tl.sum(u_acc, axis=0))

    @triton.jit
    def _apply_kernel(
        w_ptrs, u_ptrs, numels, block_tensor, block_start, squares, apply_ptr, lr,
        ADAPT: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        if tl.load(apply_ptr) == 0:
            return
        t, offsets, mask = _block(block_tensor, block_start, numels, BLOCK)
        w_ptr, u_ptr = _tensor(w_ptrs, t), _tensor(u_ptrs, t)
        u = tl.load(u_ptr + offsets, mask=mask, other=0.0)
        if ADAPT:
            w_norm = tl.sqrt(tl.load(squares + 2 * t))
            u_norm = tl.sqrt(tl.load(squares + 2 * t + 1))
            ratio = tl.where((w_norm > 0) & (u_norm > 0), w_norm / u_norm, 1.0)
            u = u * ratio
        w = tl.load(w_ptr + offsets, mask=mask, other=0.0)
        tl.store(w_ptr + offsets, w - lr * u, mask=mask)


@dataclass(frozen=True)
class Layout:
    """Where every program of a launch works: the block table of one group's tensors (by size)."""

    numels: torch.Tensor  # [T] int64
    block_tensor: torch.Tensor  # [N] int32: the tensor of program i
    block_start: torch.Tensor  # [N] int64: its first element
    first_block: torch.Tensor  # [T] int64: a tensor's first program
    num_blocks: torch.Tensor  # [T] int64
    blocks: int


def layout(numels: tuple[int, ...], device: torch.device) -> Layout:
    counts = [-(-n // BLOCK) for n in numels]
    tensor_of = [t for t, c in enumerate(counts) for _ in range(c)]
    start = [b * BLOCK for c in counts for b in range(c)]
    first = [sum(counts[:t]) for t in range(len(counts))]

    def on(values, dtype):
        return _to_device(torch.tensor(values, dtype=dtype), device)

    return Layout(
        on(list(numels), torch.int64),
        on(tensor_of, torch.int32),
        on(start, torch.int64),
        on(first, torch.int64),
        on(counts, torch.int64),
        len(tensor_of),
    )


def _to_device(table: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A small host table on the device without blocking the host: pinned (the caching host
    allocator keeps the buffer until the copy has run); a pageable copy would wait for the device."""
    return table.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else table


def _addresses(tensors: list[list[torch.Tensor]], device: torch.device) -> torch.Tensor:
    """[len(tensors), T] int64 of data pointers, on the device."""
    return _to_device(torch.tensor([[t.data_ptr() for t in row] for row in tensors], dtype=torch.int64), device)


def lamb_step(
    weights: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    adapt: bool,
    apply: torch.Tensor,
    reduce_squares,
    cache: dict,
) -> None:
    """One LAMB step over a group's local tensors, in place; `grads` are overwritten with the
    update. `apply`: a one-element int32 device tensor, 0 = leave everything as it was.
    `reduce_squares(squares [T, 2])`: sums the per-tensor squares of sharded tensors over their
    groups, in place. `cache` keeps the block table between steps."""
    device = weights[0].device
    key = tuple(t.numel() for t in weights)
    if cache.get("key") != key:
        cache["key"], cache["layout"] = key, layout(key, device)
    lay: Layout = cache["layout"]
    if lay.blocks == 0:
        return
    ptrs = _addresses([weights, grads, exp_avgs, exp_avg_sqs], device)
    w_ptrs, g_ptrs, m_ptrs, v_ptrs = ptrs.unbind()
    partials = torch.empty(2 * lay.blocks if adapt else 1, dtype=torch.float32, device=device)
    _moments_kernel[(lay.blocks,)](
        w_ptrs, g_ptrs, m_ptrs, v_ptrs, lay.numels, lay.block_tensor, lay.block_start, partials, apply,
        beta1, 1.0 - beta1, beta2, 1.0 - beta2, eps, weight_decay,
        SUMS=adapt, BLOCK=BLOCK,
    )  # fmt: skip
    squares = partials
    if adapt:
        squares = torch.zeros(len(weights), 2, dtype=torch.float32, device=device)
        _norms_kernel[(len(weights),)](partials, lay.first_block, lay.num_blocks, squares, apply, NORM_BLOCK=NORM_BLOCK)
        reduce_squares(squares)
    _apply_kernel[(lay.blocks,)](
        w_ptrs, g_ptrs, lay.numels, lay.block_tensor, lay.block_start, squares, apply, lr, ADAPT=adapt, BLOCK=BLOCK
    )


__all__ = ["BLOCK", "Layout", "available", "interpreted", "lamb_step", "layout", "usable"]
