"""Pretraining losses and accuracies: weighted MLM over masked positions, and the sentence objective
(SOP or NSP, the same two-way head), absent when the batch has no sentence labels."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class PretrainingLoss:
    loss: torch.Tensor  # mlm_loss + sop_loss, the value to backpropagate
    mlm_loss: torch.Tensor
    sop_loss: torch.Tensor | None  # None without sentence labels
    mlm_correct: torch.Tensor  # weighted count of correct masked predictions
    mlm_weight: torch.Tensor  # sum of masked-position weights
    sop_correct: torch.Tensor  # count of correct order predictions


@dataclass
class PretrainingSums:
    """Un-normalised sums over a (micro-)batch, so any split of a batch adds up to the whole."""

    mlm_ce: torch.Tensor  # sum of w * CE over masked positions
    sop_ce: torch.Tensor  # sum of CE over sequences (0, outside the graph, without sentence labels)
    mlm_correct: torch.Tensor
    mlm_weight: torch.Tensor
    sop_correct: torch.Tensor


def pretraining_sums(
    mlm_logits: torch.Tensor,
    sop_logits: torch.Tensor,
    masked_lm_ids: torch.Tensor,
    masked_lm_weights: torch.Tensor,
    sentence_order_label: torch.Tensor | None,
) -> PretrainingSums:
    """mlm_logits: (B, P, V) at the masked positions; masked_lm_ids, masked_lm_weights: (B, P), with
    weight 0 on padding positions; sop_logits: (B, 2); sentence_order_label: (B,), or None without a
    sentence objective (data.sentence_objective=none): then the sentence head takes no part in the loss
    and gets no gradient."""
    weights = masked_lm_weights.to(torch.float32)
    ce = F.cross_entropy(mlm_logits.float().flatten(0, 1), masked_lm_ids.long().flatten(), reduction="none")
    if sentence_order_label is None:
        sop_ce = torch.zeros((), dtype=torch.float32, device=sop_logits.device)
    else:
        sop_ce = F.cross_entropy(sop_logits.float(), sentence_order_label.long(), reduction="sum")
    with torch.no_grad():
        mlm_correct = ((mlm_logits.argmax(-1) == masked_lm_ids).float() * weights).sum()
        sop_correct = (
            torch.zeros_like(sop_ce)
            if sentence_order_label is None
            else (sop_logits.argmax(-1) == sentence_order_label).sum().float()
        )
    return PretrainingSums(
        mlm_ce=(ce * weights.flatten()).sum(),
        sop_ce=sop_ce,
        mlm_correct=mlm_correct,
        mlm_weight=weights.sum(),
        sop_correct=sop_correct,
    )


def pretraining_loss(
    mlm_logits: torch.Tensor,
    sop_logits: torch.Tensor,
    masked_lm_ids: torch.Tensor,
    masked_lm_weights: torch.Tensor,
    sentence_order_label: torch.Tensor | None,
) -> PretrainingLoss:
    """MLM loss = sum(w * CE) / (sum(w) + 1e-5) over masked positions (the original's formula) plus
    the mean sentence-objective cross-entropy (none without labels), for one batch."""
    s = pretraining_sums(mlm_logits, sop_logits, masked_lm_ids, masked_lm_weights, sentence_order_label)
    mlm_loss = s.mlm_ce / (s.mlm_weight + 1e-5)
    sop_loss = None if sentence_order_label is None else s.sop_ce / sop_logits.shape[0]
    return PretrainingLoss(
        loss=mlm_loss if sop_loss is None else mlm_loss + sop_loss,
        mlm_loss=mlm_loss,
        sop_loss=sop_loss,
        mlm_correct=s.mlm_correct,
        mlm_weight=s.mlm_weight,
        sop_correct=s.sop_correct,
    )


__all__ = ["PretrainingLoss", "PretrainingSums", "pretraining_loss", "pretraining_sums"]
