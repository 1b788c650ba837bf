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
    with torch.no_grad():
        mlm_correct = ((mlm_logits.argmax(-1) == masked_lm_ids).float() * weights).sum()
    return _with_sentence_sums(
        (ce * weights.flatten()).sum(), mlm_correct, weights.sum(), sop_logits, sentence_order_label
    )


def fused_pretraining_sums(
    mlm_hidden: torch.Tensor,
    word_embeddings: torch.Tensor,
    mlm_bias: torch.Tensor,
    sop_logits: torch.Tensor,
    masked_lm_ids: torch.Tensor,
    masked_lm_weights: torch.Tensor,
    sentence_order_label: torch.Tensor | None,
) -> PretrainingSums:
    """pretraining_sums from the MLM decoder's input (B, P, E) instead of its logits: the decoder
    (tied to `word_embeddings`, plus `mlm_bias`) and the cross-entropy in one op that never stores
    the (B, P, V) logits (Liger Kernel's fused linear cross-entropy, on CUDA where it is installed:
    chunks of logits, each softmaxed and differentiated in place). Exact for weights of 0 and 1 (the
    data stage's: 1 at a masked position, 0 on padding), which become kept and ignored targets.
    Without Liger, or off CUDA, the logits are computed and pretraining_sums applies."""
    if not fused_mlm_available(mlm_hidden.device):
        logits = F.linear(mlm_hidden, word_embeddings, mlm_bias)
        return pretraining_sums(logits, sop_logits, masked_lm_ids, masked_lm_weights, sentence_order_label)
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    weights = masked_lm_weights.to(torch.float32)
    ids = masked_lm_ids.long().flatten()
    out = liger_fused_linear_cross_entropy(
        mlm_hidden.flatten(0, 1),
        word_embeddings,
        torch.where(weights.flatten() > 0, ids, IGNORED),
        bias=mlm_bias,
        ignore_index=IGNORED,
        reduction="sum",
        accum_dtype=torch.float32,  # the weight's gradient summed over chunks in fp32, as one product would
        return_predicted_tokens=True,
        # one chunk: at ALBERT's E=128 Liger's default (logits no larger than the input) makes chunks
        # of ~32 rows, each a separate launch; P masked positions keep all the logits small anyway
        chunk_mem_const=-(-word_embeddings.shape[0] // word_embeddings.shape[1]),
    )
    with torch.no_grad():
        mlm_correct = ((out.predicted_tokens.view(-1) == ids).float() * weights.flatten()).sum()
    return _with_sentence_sums(out.loss.float(), mlm_correct, weights.sum(), sop_logits, sentence_order_label)


def output_sums(model, out, batch: dict[str, torch.Tensor | None]) -> PretrainingSums:
    """The sums of AlbertForPreTraining `model`'s output `out` on `batch` (its masked_lm_ids,
    masked_lm_weights and, where the data has one, sentence_order_label): from the logits, or,
    under model.fused_mlm_loss, from the decoder's input through fused_pretraining_sums."""
    targets = (out.sop_logits, batch["masked_lm_ids"], batch["masked_lm_weights"], batch.get("sentence_order_label"))
    if out.mlm_logits is not None:
        return pretraining_sums(out.mlm_logits, *targets)
    tied = (model.albert.embeddings.word_embeddings.weight, model.predictions.bias)
    return fused_pretraining_sums(out.mlm_hidden, *tied, *targets)


IGNORED = -100
"""The target the fused cross-entropy leaves out (weight 0: a padding position)."""


def fused_mlm_available(device: torch.device) -> bool:
    """Whether fused_pretraining_sums fuses on `device`: CUDA, and Liger Kernel importable."""
    if device.type != "cuda":
        return False
    try:
        import liger_kernel.transformers.functional  # noqa: F401
    except ImportError:
        return False
    return True


def _with_sentence_sums(
    mlm_ce: torch.Tensor,
    mlm_correct: torch.Tensor,
    mlm_weight: torch.Tensor,
    sop_logits: torch.Tensor,
    sentence_order_label: torch.Tensor | None,
) -> PretrainingSums:
    if sentence_order_label is None:
        sop_ce = torch.zeros((), dtype=torch.float32, device=sop_logits.device)
        sop_correct = torch.zeros_like(sop_ce)
    else:
        sop_ce = F.cross_entropy(sop_logits.float(), sentence_order_label.long(), reduction="sum")
        with torch.no_grad():
            sop_correct = (sop_logits.argmax(-1) == sentence_order_label).sum().float()
    return PretrainingSums(
        mlm_ce=mlm_ce, sop_ce=sop_ce, mlm_correct=mlm_correct, mlm_weight=mlm_weight, sop_correct=sop_correct
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


__all__ = [
    "PretrainingLoss",
    "PretrainingSums",
    "fused_mlm_available",
    "fused_pretraining_sums",
    "output_sums",
    "pretraining_loss",
    "pretraining_sums",
]
