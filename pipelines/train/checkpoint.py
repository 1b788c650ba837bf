"""Sharded checkpoints with torch.distributed.checkpoint: model and optimizer (DTensor shards),
plus the step, the schedule and every rank's RNG, so a resumed run continues bit for bit.

Layout of one checkpoint folder (each rank writes its own files into its own local folder; Ray
Train uploads all ranks' folders into one checkpoint):
- `.metadata`, `__<rank>_0.distcp`: the DCP shards of {"model": ..., "optimizer": ...}
- `train_state.json` (rank 0): step, scheduler state, world size
- `rng_rank<r>.pt`: that rank's torch, numpy and python RNG states
"""
from __future__ import annotations

import json
import os
import random

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

TRAIN_STATE = "train_state.json"


def _rank() -> int:
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def save_checkpoint(directory: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler,
                    step: int, extra: dict | None = None) -> None:
    os.makedirs(directory, exist_ok=True)
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)
    rank = _rank()
    torch.save({"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []},
               os.path.join(directory, f"rng_rank{rank}.pt"))
    if rank == 0:
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        state = {"step": step, "scheduler": scheduler.state_dict(), "world_size": world, **(extra or {})}
        with open(os.path.join(directory, TRAIN_STATE), "w") as f:
            json.dump(state, f)


def load_checkpoint(directory: str, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    scheduler) -> dict:
    """Restore everything `save_checkpoint` wrote; returns train_state.json (its "step" is the
    number of optimizer steps already taken)."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=directory)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    with open(os.path.join(directory, TRAIN_STATE)) as f:
        train_state = json.load(f)
    scheduler.load_state_dict(train_state["scheduler"])
    rng_file = os.path.join(directory, f"rng_rank{_rank()}.pt")
    if os.path.exists(rng_file):  # absent when resuming on more ranks than saved
        rng = torch.load(rng_file, weights_only=False)
        torch.set_rng_state(rng["torch"])
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
    return train_state
