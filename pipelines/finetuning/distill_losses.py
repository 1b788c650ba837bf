"""The losses of depth distillation and early exit, pure PyTorch, each a sum over a batch's examples
(the fine-tuning loop scales sums to the global batch's mean):

- the soft-target losses a student learns its teacher's outputs with (Hinton et al. 2015): the
  temperature-scaled KL of softmaxes, scaled by T^2 so its gradients keep their size as T changes
  (a single-label classifier); the same per class for independent sigmoids (multi-label); the
  squared error to the teacher's output (regression, whose output is no distribution); the
  softmax KL at each counted position (token classification: the tokens its own loss counts); the
  KL of a softmax over a window's positions (question answering's start and end: the positions
  the teacher's logits are finite at);
- their mix with the task's own (hard-label) loss, `alpha` the hard loss's share (distill.alpha);
- the mean squared error of hidden states at mapped depths (student step i against teacher step
  round(i * teacher / student): 2i at half depth);
- PABEE's weighted sum of the losses at every depth (Zhou et al. 2020), depth j weighted j, so the
  deeper states, which carry the final answer, count most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F


def softmax_kl_sum(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)), summed over the batch ([B, C] logits)."""
    t = temperature
    log_p_student = F.log_softmax(student.float() / t, dim=-1)
    log_p_teacher = F.log_softmax(teacher.float() / t, dim=-1)
    return F.kl_div(log_p_student, log_p_teacher, reduction="sum", log_target=True) * t * t


def sigmoid_kl_sum(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL of the teacher's Bernoulli from the student's, per class at temperature T: summed over
    the batch, each example's mean over its classes (as multi-label's own loss averages them)."""
    t = temperature
    s, q = student.float() / t, teacher.float() / t
    # KL(q || s) of two Bernoullis from logits: p_q * (log p_q - log p_s) + (1 - p_q) * (log(1-p_q) - log(1-p_s))
    p_q = torch.sigmoid(q)
    kl = p_q * (F.logsigmoid(q) - F.logsigmoid(s)) + (1 - p_q) * (F.logsigmoid(-q) - F.logsigmoid(-s))
    return kl.sum() / student.shape[-1] * t * t


def position_kl_sum(
    student: torch.Tensor, teacher: torch.Tensor, counted: torch.Tensor, temperature: float
) -> torch.Tensor:
    """softmax_kl_sum over the labels at each `counted` position of [B, S, L] logits ([B, S] bool),
    summed over those positions: the others' logits take no part."""
    return softmax_kl_sum(student[counted], teacher[counted], temperature)


def span_kl_sum(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * KL of softmaxes over the positions of [B, S] logits where the teacher's are finite (its
    -inf: a position no answer can be at), summed over the batch: the student's logits elsewhere
    take no part."""
    t = temperature
    counted = torch.isfinite(teacher)
    # -inf outside both softmaxes, then 0 in place of their log-probabilities there: no 0 * inf
    log_p_student = F.log_softmax(student.float().masked_fill(~counted, -math.inf) / t, dim=-1)
    log_p_teacher = F.log_softmax(teacher.float() / t, dim=-1)
    kl = F.kl_div(
        log_p_student.masked_fill(~counted, 0.0),
        log_p_teacher.masked_fill(~counted, 0.0),
        reduction="none",
        log_target=True,
    )
    return kl.sum() * t * t


def squared_error_sum(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Squared error of the student's outputs from the teacher's, summed (regression: no temperature)."""
    return F.mse_loss(student.float(), teacher.float(), reduction="sum")


def mixed_loss(hard: torch.Tensor, soft: torch.Tensor, alpha: float) -> torch.Tensor:
    """alpha * the task's loss + (1 - alpha) * the soft-target loss (alpha = 0: the teacher alone)."""
    return alpha * hard + (1 - alpha) * soft


def depth_map(student_depth: int, teacher_depth: int) -> list[int]:
    """The teacher's step (1-based) each student step i = 1..student_depth is matched to:
    round(i * teacher / student), so the last steps meet (2i at half depth)."""
    return [round(i * teacher_depth / student_depth) for i in range(1, student_depth + 1)]


def hidden_mse_sum(
    student_states: Sequence[torch.Tensor],
    teacher_states: Sequence[torch.Tensor],
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean squared error of paired [B, S, H] states over each example's tokens (padding left out)
    and the hidden units, summed over the pairs and the batch."""
    total = student_states[0].new_zeros((), dtype=torch.float32)
    for s, t in zip(student_states, teacher_states, strict=True):
        error = (s.float() - t.float()).pow(2).mean(-1)  # (B, S)
        if attention_mask is None:
            total = total + error.mean(-1).sum()
        else:
            mask = attention_mask.float()
            total = total + ((error * mask).sum(-1) / mask.sum(-1).clamp(min=1)).sum()
    return total


def depth_weighted_sum(losses: Sequence[torch.Tensor]) -> torch.Tensor:
    """PABEE's loss: sum_j j * losses[j-1] / sum_j j over the depths j = 1..D."""
    weights = range(1, len(losses) + 1)
    return sum(w * loss for w, loss in zip(weights, losses)) / sum(weights)


__all__ = [
    "depth_map",
    "depth_weighted_sum",
    "hidden_mse_sum",
    "mixed_loss",
    "position_kl_sum",
    "sigmoid_kl_sum",
    "softmax_kl_sum",
    "span_kl_sum",
    "squared_error_sum",
]
