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


def sum_over_groups(rows: torch.Tensor, groups: list[dist.ProcessGroup | None]) -> torch.Tensor:
    """Row i of `rows` summed over the ranks of groups[i] (None: kept), in place: one all-reduce per
    process group, in order of first use (the same on every rank; a set's order is not)."""
    for group in dict.fromkeys(groups):
        if group is None:
            continue
        members = [i for i, g in enumerate(groups) if g is group]
        if len(members) == len(groups):
            dist.all_reduce(rows, group=group)
        else:
            summed = torch.stack([rows[i] for i in members])  # no index tensor copied from the host
            dist.all_reduce(summed, group=group)
            for i, row in zip(members, summed.unbind()):
                rows[i].copy_(row)
    return rows


def full_norms(tensors: list[torch.Tensor], groups: list[dist.ProcessGroup | None]) -> torch.Tensor:
    """The L2 norm of each whole tensor, as one device vector: a multi-tensor norm of the local
    shards and one all-reduce of the squares per process group, nothing read back to the host."""
    squares = torch.stack(torch._foreach_norm([local_tensor(t).float() for t in tensors])).pow(2)
    return sum_over_groups(squares, groups).sqrt()


__all__ = ["all_reduce_sum", "full_norms", "local_tensor", "rank", "shard_groups", "sum_over_groups", "world_size"]
