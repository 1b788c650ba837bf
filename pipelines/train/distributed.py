"""The process group as the training code sees it: rank, world size, a sum over ranks and the full
norms of FSDP2-sharded tensors, all of which also work in a single process without one (the unit
tests, a CPU debug run)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard


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


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a DTensor (a view: in-place updates reach the DTensor); `t` otherwise."""
    return t.to_local() if isinstance(t, DTensor) else t


def shard_groups(tensors: list[torch.Tensor]) -> list[dist.ProcessGroup | None]:
    """Per tensor: the process group its shards are spread over (None: whole on this rank)."""
    groups = []
    for t in tensors:
        dims = [d for d, p in enumerate(t.placements) if isinstance(p, Shard)] if isinstance(t, DTensor) else []
        if len(dims) > 1:
            raise NotImplementedError("tensors sharded over more than one mesh dimension")
        groups.append(t.device_mesh.get_group(dims[0]) if dims else None)
    return groups


def full_norms(tensors: list[torch.Tensor], groups: list[dist.ProcessGroup | None]) -> torch.Tensor:
    """The L2 norm of each whole tensor, as one device vector: a multi-tensor norm of the local
    shards and one all-reduce of the squares per process group, nothing read back to the host."""
    norms: list[torch.Tensor | None] = [None] * len(tensors)
    for group in dict.fromkeys(groups):  # in order of first use, the same on every rank (a set's is not)
        members = [i for i, g in enumerate(groups) if g is group]
        squares = torch.stack(torch._foreach_norm([local_tensor(tensors[i]).float() for i in members])).pow(2)
        if group is not None:
            dist.all_reduce(squares, group=group)
        for i, norm in zip(members, squares.sqrt().unbind()):
            norms[i] = norm
    return torch.stack(norms)


__all__ = ["all_reduce_sum", "full_norms", "local_tensor", "rank", "shard_groups", "world_size"]
