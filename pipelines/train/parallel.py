"""Parallelism and memory/speed transforms for ALBERT, in torchtitan's order: activation
checkpointing, then compile, then FSDP2 (one unit: the shared layer group, the tied word
embedding and MLM decoder together)."""

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


# Graphs one layer group's code may need in a run: with and without the masked positions (the
# last depth step), training and evaluation, a first static shape and then a dynamic one, per model
# built in the process. Dynamo's default limit of 8 per code object is reached by one worker that
# also evaluates; past it the group silently runs eager.
RECOMPILE_LIMIT = 64


def apply_compile(model: AlbertForPreTraining, scope: str = "layers", mode: str | None = None) -> None:
    """torch.compile in place (names and parameters unchanged): each layer group (`scope="layers"`),
    or the whole encoder, every depth step in one graph (`"encoder"`: one compiled call per forward
    and backward instead of one per depth step, at a longer compilation). `mode`: torch.compile's."""
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
    if scope == "encoder":
        model.albert.encoder.compile(mode=mode)
        return
    if scope != "layers":
        raise ValueError(f"compile scope {scope!r}: layers or encoder")
    for group in model.albert.encoder.albert_layer_groups:
        group.compile(mode=mode)


def apply_fsdp(model: AlbertForPreTraining, mesh: DeviceMesh, param_dtype: torch.dtype | None = None) -> None:
    """Shard `model` in place over `mesh`: one FSDP2 unit for the whole model, kept unsharded
    from the forward's start until backward ends (one all-gather and one reduce-scatter per step).

    With every layer shared (sharing="all", ALBERT's design) a unit per layer group buys nothing:
    the group is needed at the first depth step and its gradient is complete only after the last
    backward one, so its all-gather and reduce-scatter could not overlap more compute than the
    root's do. It costs host time at every depth step instead: FSDP2's hooks ran at each of the
    num_hidden_layers depth steps, forward and backward (0.15 + 0.75 ms of host time for
    ALBERT-large on an H100 host, where the step is bound by the host: bench/gpu_suite.py). The partial
    sharing modes reuse submodules across groups, which must stay in one unit; with no sharing a
    unit per group would let the gathers overlap compute (as torchtitan does per block): not done
    yet, since ALBERT's recipes share everything.
    """
    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else None
    kwargs = {"mesh": mesh, **({"mp_policy": mp} if mp else {})}
    fully_shard(model, reshard_after_forward=False, **kwargs)
