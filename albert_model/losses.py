"""Pretraining losses and accuracies: weighted MLM over masked positions, and SOP."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PretrainingLoss:
    loss: torch.Tensor  # mlm_loss + sop_loss, the value to backpropagate
    mlm_loss: torch.Tensor
    sop_loss: torch.Tensor
    mlm_correct: torch.Tensor  # weighted count of correct masked predictions
    mlm_weight: torch.Tensor  # sum of masked-position weights
    sop_correct: torch.Tensor  # count of correct order predictions


def pretraining_loss(mlm_logits: torch.Tensor, sop_logits: torch.Tensor, masked_lm_ids: torch.Tensor,
                     masked_lm_weights: torch.Tensor, sentence_order_label: torch.Tensor) -> PretrainingLoss:
    """MLM loss = sum(w * CE) / (sum(w) + 1e-5) over masked positions (the original's formula).

    mlm_logits: (B, P, V) at the masked positions; masked_lm_ids, masked_lm_weights: (B, P), with
    weight 0 on padding positions; sop_logits: (B, 2); sentence_order_label: (B,).
    """
    weights = masked_lm_weights.to(torch.float32)
    ce = F.cross_entropy(mlm_logits.float().flatten(0, 1), masked_lm_ids.long().flatten(), reduction="none")
    weight_sum = weights.sum()
    mlm_loss = (ce * weights.flatten()).sum() / (weight_sum + 1e-5)
    sop_loss = F.cross_entropy(sop_logits.float(), sentence_order_label.long())
    with torch.no_grad():
        mlm_correct = ((mlm_logits.argmax(-1) == masked_lm_ids).float() * weights).sum()
        sop_correct = (sop_logits.argmax(-1) == sentence_order_label).sum()
    return PretrainingLoss(loss=mlm_loss + sop_loss, mlm_loss=mlm_loss, sop_loss=sop_loss,
                           mlm_correct=mlm_correct, mlm_weight=weight_sum, sop_correct=sop_correct)


__all__ = ["PretrainingLoss", "pretraining_loss"]
