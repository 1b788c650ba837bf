"""Parallelism and memory/speed transforms for ALBERT, in torchtitan's order: activation
checkpointing, then compile, then FSDP2 (the layer groups sharded once, the tied word embedding /
MLM decoder in the root group)."""

from __future__ import annotations

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from albert_model import AlbertForPreTraining


def apply_ac(model: AlbertForPreTraining) -> None:
    """Recompute each layer-group application in backward (L recomputations for a group run L
    times) instead of keeping its activations. State-dict names are unchanged (the wrapper strips
    its prefix)."""
    groups = model.albert.encoder.albert_layer_groups
    for i, group in enumerate(groups):
        groups[i] = checkpoint_wrapper(group, preserve_rng_state=True)


def apply_compile(model: AlbertForPreTraining) -> None:
    """torch.compile each layer group in place (names and parameters unchanged)."""
    for group in model.albert.encoder.albert_layer_groups:
        group.compile()


def apply_fsdp(model: AlbertForPreTraining, mesh: DeviceMesh, param_dtype: torch.dtype | None = None) -> None:
    """Shard `model` in place over `mesh`.

    A layer group runs num_hidden_layers times per step: with reshard_after_forward=True it would
    be all-gathered again at every depth step in forward and backward. Kept unsharded from its
    first use until backward ends instead: one gather per step, at the cost of one group's
    unsharded weights in memory (7M parameters for base).
    """
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else None
    kwargs = {"mesh": mesh, **({"mp_policy": mp} if mp else {})}
    if model.config.sharing == "all":
        for group in model.albert.encoder.albert_layer_groups:
            fully_shard(group, reshard_after_forward=False, **kwargs)
    fully_shard(model, reshard_after_forward=False, **kwargs)
