"""What a trial trains and against what: the model it exports and evaluates, the module the loop
calls (the model itself, or a view of it reading more than its last depth), the loss of that
module's outputs, and the targets row per example. Plain fine-tuning; the head trained at every
depth (finetune.exit_heads: PABEE's weighted loss); a distilled student (distill: the soft-target
loss mixed with the task's own, plus hidden-state matching against a teacher run in the trial)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from albert_model.depths import depth_logits, read_state, step_states
from albert_model.hf import load_hf_pretrained

from ..config import FinetuneSection
from .distill import Packing, Teacher, build_student, packed_targets
from .distill_losses import depth_map, depth_weighted_sum, hidden_mse_sum, mixed_loss
from .family import EncodedTask, TaskFamily
from .loop import LossSum, build_model


@dataclass
class Objective:
    model: nn.Module
    """What is evaluated and exported (a standard ALBERT head)."""
    trained: nn.Module
    """What the loop calls: `model`, or a view of it (its parameters, no others trained)."""
    loss_of: LossSum
    targets: torch.Tensor
    """A row per training example, as `loss_of` reads them."""


class EveryDepth(nn.Module):
    """The head read at every depth: logits (D, B, labels)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        return depth_logits(self.model, **inputs)


class HiddenMatched(nn.Module):
    """The student's outputs (its head read at its last depth, or every depth) and the summed mean
    squared error of its states against a frozen teacher's at mapped depths (distill_losses.depth_map)."""

    def __init__(self, student: nn.Module, teacher: nn.Module, every_depth: bool):
        super().__init__()
        self.student, self.teacher, self.every_depth = student, teacher.requires_grad_(False), every_depth
        self.pairs = depth_map(student.config.num_hidden_layers, teacher.config.num_hidden_layers)

    def train(self, mode: bool = True) -> HiddenMatched:
        super().train(mode)
        self.teacher.eval()  # the targets: no dropout in them
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[Any, torch.Tensor]:
        # multiple choice's (B, C, S): each choice's sequence is one of B * C, its score read back as (B, C)
        shape = input_ids.shape
        inputs = [None if t is None else t.reshape(-1, shape[-1]) for t in (input_ids, token_type_ids, attention_mask)]
        states = step_states(self.student.albert, *inputs)
        with torch.no_grad():
            targets = step_states(self.teacher.albert, *inputs)
        hidden = hidden_mse_sum(states, [targets[j - 1] for j in self.pairs], inputs[2])
        hidden = hidden / shape[1] if len(shape) == 3 else hidden  # a question's: the mean over its choices
        read = [read_state(self.student, s) for s in (states if self.every_depth else states[-1:])]
        if len(shape) == 3:
            read = [r.view(*shape[:2]) for r in read]
        return (torch.stack(read) if self.every_depth else read[0]), hidden


def per_depth(loss_of: LossSum) -> LossSum:
    """`loss_of` at every depth of (D, B, ...) outputs, weighted by depth (PABEE)."""
    return lambda outputs, targets: depth_weighted_sum([loss_of(o, targets) for o in outputs])


def student_loss(family: TaskFamily, teacher: Teacher, packing: Packing) -> LossSum:
    """alpha * the task's loss + (1 - alpha) * the soft-target loss, on packed targets."""
    settings = teacher.settings

    def loss_of(logits: Any, targets: torch.Tensor) -> torch.Tensor:
        hard, soft = packing.unpack(targets, family.target_dtype)
        return mixed_loss(
            family.loss_sum(logits, hard),
            family.soft_loss_sum(logits, soft, settings.temperature, hard),
            settings.alpha,
        )

    return loss_of


def build_objective(
    cfg: FinetuneSection, family: TaskFamily, task: EncodedTask, directory: str, teacher: Teacher | None
) -> Objective:
    """The trial's objective; `directory` holds the pretrained model (distilling: the teacher)."""
    if teacher is None:
        model = build_model(directory, family.model_class, task.num_labels, cfg.classifier_dropout, cfg.init, cfg.seed)
        targets = torch.tensor(task.train_targets, dtype=family.target_dtype)  # a copy: the task arrives read-only
        if cfg.exit_heads:
            return Objective(model, EveryDepth(model), per_depth(family.loss_sum), targets)
        return Objective(model, model, family.loss_sum, targets)
    torch.manual_seed(cfg.seed)  # the student's dropout
    model = build_student(directory, family.model_class, teacher.layers, cfg.classifier_dropout)
    targets, packing = packed_targets(task, teacher, family.targets_by_position, cfg.max_seq_length)
    loss_of = student_loss(family, teacher, packing)
    if teacher.settings.hidden_weight > 0:
        matched = HiddenMatched(model, load_hf_pretrained(directory, family.model_class), cfg.exit_heads)
        logits_loss = per_depth(loss_of) if cfg.exit_heads else loss_of
        weight = teacher.settings.hidden_weight

        def matched_loss(outputs: tuple[Any, torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
            logits, hidden = outputs
            return logits_loss(logits, targets) + weight * hidden

        return Objective(model, matched, matched_loss, targets)
    if cfg.exit_heads:
        return Objective(model, EveryDepth(model), per_depth(loss_of), targets)
    return Objective(model, model, loss_of, targets)


__all__ = ["EveryDepth", "HiddenMatched", "Objective", "build_objective", "per_depth", "student_loss"]
