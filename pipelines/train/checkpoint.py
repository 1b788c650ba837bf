"""Sharded checkpoints with torch.distributed.checkpoint: model and optimizer (DTensor shards),
plus the step, the schedule and every rank's RNG, so a resumed run continues bit for bit.

Layout of one checkpoint folder (each rank writes its own files into its own local folder; Ray
Train uploads all ranks' folders into one checkpoint):
- `.metadata`, `__<rank>_0.distcp`: the DCP shards of {"model": ..., "optimizer": ...}
- `train_state.json` (rank 0): step, scheduler state, world size
- `rng_rank<r>.json`: that rank's python and numpy RNG states; `rng_rank<r>.pt`: its torch and
  (its own device's) CUDA generator states as uint8 tensors, read with `torch.load(weights_only=True)`

Loading runs no code from the folder: DCP's `.metadata` and the optimizer's non-tensor values
(which torch.distributed.checkpoint writes with pickle) are read through dcp_reader.py, with an
allowlist of DCP's metadata classes and weights_only=True.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import random
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from .dcp_reader import load_state
from .distributed import rank, world_size

TRAIN_STATE = "train_state.json"


def _rng_state() -> tuple[dict, dict]:
    """(JSON-ready python and numpy states, tensors of the torch and CUDA generators)."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    plain = {
        "python": [version, list(mt), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    # this rank's device only: ranks on one node may see all its GPUs, and a resume on fewer ranks
    # would find fewer devices than states
    tensors = {
        "torch": torch.get_rng_state(),
        "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() else [],
    }
    return plain, tensors


def _set_rng_state(plain: dict, tensors: dict) -> None:
    version, mt, gauss = plain["python"]
    random.setstate((version, tuple(mt), gauss))
    kind, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    if tensors["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(tensors["cuda"][0])


def _alone() -> bool:
    """One rank: DCP then skips its collectives, whose gloo threads would otherwise start an OpenMP
    team of their own. libgomp counts every team's threads, and once they outnumber the CPUs it
    makes all teams' idle threads sleep after ~100 spins instead of ~300,000: on a 2-core worker
    the training thread's team then wakes its helper by futex at every parallel region: ~10% of a
    CPU step in a quiet process, more in `make run`'s job, where Ray's niced worker waits to be
    woken behind the head's processes (docs/BENCHMARKS.md)."""
    return world_size() == 1


@contextlib.contextmanager
def single_process_quietly():
    """DCP warns "torch.distributed is disabled ... assuming the intent is to save (load) in a single
    process" whenever it runs without a process group, even when no_dist=True asks for exactly that
    (torch/distributed/checkpoint/state_dict_saver.py): a UserWarning in the job's log at every
    checkpoint of a one-worker run. That warning alone is silenced, around the call that asked."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled, unavailable or uninitialized", UserWarning)
        yield


def save_checkpoint(
    directory: str,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler,
    step: int,
    extra: dict | None = None,
) -> None:
    os.makedirs(directory, exist_ok=True)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    with single_process_quietly():
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory, no_dist=_alone())
    this_rank = rank()
    plain, tensors = _rng_state()
    with open(os.path.join(directory, f"rng_rank{this_rank}.json"), "w") as f:
        json.dump(plain, f)
    torch.save(tensors, os.path.join(directory, f"rng_rank{this_rank}.pt"))
    if this_rank == 0:
        state = {"step": step, "scheduler": scheduler.state_dict(), "world_size": world_size(), **(extra or {})}
        with open(os.path.join(directory, TRAIN_STATE), "w") as f:
            json.dump(state, f)


def load_checkpoint(directory: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> dict:
    """Restore everything `save_checkpoint` wrote, on any number of ranks (DCP reshards); returns
    train_state.json (its "step" is the number of optimizer steps already taken). The learning
    rate is recomputed from `scheduler`'s schedule at that step, so a run continued with a larger
    total follows the new schedule (a resume with the same total gets the same value)."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    with single_process_quietly():
        load_state(state, directory, no_dist=_alone())
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    with open(os.path.join(directory, TRAIN_STATE)) as f:
        train_state = json.load(f)
    scheduler.load_state_dict(train_state["scheduler"])
    set_schedule_lr(optimizer, scheduler)
    prefix = os.path.join(directory, f"rng_rank{rank()}")
    if os.path.exists(prefix + ".json"):  # absent when resuming on more ranks than saved
        with open(prefix + ".json") as f:
            plain = json.load(f)
        _set_rng_state(plain, torch.load(prefix + ".pt", weights_only=True))
    return train_state


@dataclass
class Snapshot:
    """The training state at a checkpoint, kept in memory (on the device) for training health's
    rollbacks: the same values the checkpoint holds, restored without reading it back."""

    step: int
    params: list[torch.Tensor]
    optimizer: dict
    scheduler: dict
    rng: tuple[dict, dict]


def take_snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, step: int) -> Snapshot:
    params = [p.detach().clone() for p in model.parameters()]
    return Snapshot(
        step, params, copy.deepcopy(optimizer.state_dict()), copy.deepcopy(scheduler.state_dict()), _rng_state()
    )


def restore_snapshot(snapshot: Snapshot, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler) -> None:
    """Parameters, optimizer state, schedule and RNG as they were at the snapshot's step."""
    with torch.no_grad():
        for param, saved in zip(model.parameters(), snapshot.params, strict=True):
            param.copy_(saved)
    optimizer.load_state_dict(copy.deepcopy(snapshot.optimizer))
    scheduler.load_state_dict(copy.deepcopy(snapshot.scheduler))
    set_schedule_lr(optimizer, scheduler)
    _set_rng_state(*snapshot.rng)


def set_schedule_lr(optimizer: torch.optim.Optimizer, scheduler) -> None:
    """Each group's learning rate from the schedule at its current step (LambdaLR: base x factor)."""
    for group, factor, base_lr in zip(optimizer.param_groups, scheduler.lr_lambdas, scheduler.base_lrs):
        group["lr"] = base_lr * factor(scheduler.last_epoch)
