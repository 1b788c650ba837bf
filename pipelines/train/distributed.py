"""The process group as the training code sees it: rank, world size and a sum over ranks, all of
which also work in a single process without one (the unit tests, a CPU debug run)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def _active() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if _active() else 0


def world_size() -> int:
    return dist.get_world_size() if _active() else 1


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """`t` summed over the ranks, in place (itself in a single process)."""
    if world_size() > 1:
        dist.all_reduce(t)
    return t


__all__ = ["all_reduce_sum", "rank", "world_size"]
