"""The optimizer's parameter groups, shared by LAMB and AdamW (pretraining and fine-tuning): kept
apart from lamb.py, whose DTensor imports a fine-tuning trial does not need."""

from __future__ import annotations

from collections.abc import Iterable

import torch

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


__all__ = ["NO_DECAY_MARKERS", "parameter_groups"]
