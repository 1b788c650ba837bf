"""The pretraining model and optimizer from their config sections."""

from __future__ import annotations

import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import load_hf_pretrained

from .groups import parameter_groups


def build_model(
    config: AlbertConfig, init_from: str | None, seed: int, sentence_objective: bool = True
) -> AlbertForPreTraining:
    """Random weights from `seed` (the same on every rank), or a transformers ALBERT directory's
    architecture and weights for continued pretraining (heads it lacks start fresh). Without a
    `sentence_objective` (data.sentence_objective=none) the sentence head and the pooler, which only
    that head reads, are frozen: they stay as they start, out of the optimizer and its checkpoints."""
    torch.manual_seed(seed)
    model = (
        AlbertForPreTraining(config)
        if init_from is None
        else load_hf_pretrained(init_from, AlbertForPreTraining, strict=False)
    )
    if not sentence_objective:
        for module in (model.sop_classifier, model.albert.pooler):
            module.requires_grad_(False)
    return model


def build_optimizer(model: torch.nn.Module, name: str, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """LAMB as in the paper, or AdamW; LayerNorm and bias parameters get no weight decay in both.
    On a GPU both are fused (LAMB's Triton step, torch's fused AdamW): one or three kernels per
    group instead of a dozen passes, and a skipped step decided on the device."""
    groups = parameter_groups(model.named_parameters(), weight_decay)
    if name == "lamb":
        from .lamb import Lamb  # here: its DTensor imports cost a fine-tuning trial ~0.4 s

        return Lamb(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)
    if name == "adamw":
        for group in groups:
            group.pop("adapt")
        on_gpu = next(model.parameters()).device.type == "cuda"
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, fused=on_gpu or None)
    raise ValueError(f"train.optimizer={name!r}: must be lamb or adamw")
