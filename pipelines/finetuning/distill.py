"""Depth distillation, free of Ray: the student (the fine-tuned teacher's own weights, its shared
layer applied fewer times: no new parameter), the teacher's outputs on the task's features computed
once by the driver, and how a trial receives them (`Teacher`, with the distill settings)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_model.config import AlbertConfig
from albert_model.hf import load_hf_pretrained

from ..config import DistillSection, FinetuneSection
from ..errors import BadInput
from ..storage.models import read_model_config
from .family import EncodedTask
from .loop import predict, resolve_precision


@dataclass(frozen=True)
class Teacher:
    """What a distilling trial receives besides the task: the teacher's outputs on every training
    feature (computed once, not in every trial) and the student's settings."""

    logits: np.ndarray
    """The teacher's scores on the training features (its family's `scores`), the soft targets:
    [features, outputs], or with a position axis [features, S, ...] zero-padded to the widest batch."""
    layers: int
    """The student's num_hidden_layers."""
    teacher_layers: int
    settings: DistillSection


def student_depth(settings: DistillSection, config: dict[str, Any], where: str) -> tuple[int, int]:
    """(student layers, teacher layers) for the teacher whose config.json is `config`; BadInput
    where the teacher is no one-shared-layer ALBERT or the student would not be shallower."""
    model = AlbertConfig.from_hf_dict(config)
    if model.sharing != "all" or model.num_hidden_groups != 1:
        raise BadInput(
            f"distill.teacher: {where} applies {model.num_hidden_groups} layer groups (sharing "
            f"{model.sharing}); depth distillation applies one shared layer fewer times"
        )
    layers = settings.student_layers(model.num_hidden_layers)
    if layers >= model.num_hidden_layers:
        raise BadInput(
            f"distill.layers={settings.layers}: {layers} is not fewer than the teacher's "
            f"num_hidden_layers={model.num_hidden_layers} ({where})"
        )
    return layers, model.num_hidden_layers


def build_student(directory: str, model_class: type[nn.Module], layers: int, dropout: float) -> nn.Module:
    """The fine-tuned model in `directory` (head included) with its shared layer applied `layers`
    times: the same parameters, so its weights load one to one."""
    config = AlbertConfig.from_hf_dict(read_model_config(directory, "distill.teacher"))
    student = model_class(config.replace(num_hidden_layers=layers, classifier_dropout_prob=dropout))
    student.load_state_dict(load_hf_pretrained(directory, model_class).state_dict())
    return student


def teacher_scores(
    cfg: FinetuneSection,
    family: Any,
    features: list,
    pad_id: int,
    directory: str,
    device: torch.device | None = None,
) -> np.ndarray:
    """The teacher's scores (its family's `scores` of its outputs: logits) on `features`, in order."""
    device = device or torch.device("cpu")
    model = load_hf_pretrained(directory, family.model_class).to(device).eval()
    return predict(
        model,
        features,
        cfg.eval_batch_size,
        pad_id,
        device=device,
        precision=resolve_precision(cfg.precision, device),
        scores_of=family.scores,
        collate_fn=family.collate,
    )


@dataclass(frozen=True)
class Packing:
    """How packed target rows split into the hard targets and the teacher's logits (packed_targets)."""

    soft_shape: tuple[int, ...]
    """The teacher's logits of a row of the packing's last axis (an example's, or a position's)."""
    flat: bool
    """One hard target per row: the family's loss takes it without the last axis."""

    def unpack(self, targets: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """(the hard targets as the family's loss takes them, the teacher's logits) of packed rows."""
        n = math.prod(self.soft_shape)
        hard, soft = targets[..., :-n], targets[..., -n:]
        return (hard[..., 0] if self.flat else hard).to(dtype), soft.reshape(*targets.shape[:-1], *self.soft_shape)


def packed_targets(task: EncodedTask, teacher: Teacher, by_position: bool, width: int) -> tuple[torch.Tensor, Packing]:
    """Each training feature's targets and its teacher's logits in one float tensor (row i: example
    i), and how it splits: the loop batches one target tensor, so the soft targets ride along with
    the hard ones through its batching, micro-batches and workers unchanged. Class ids and token
    positions are exact as floats.

    Logits with a position axis (token classification's, QA's start and end: [N, S, ...], zero-padded
    to the widest batch) are padded to `width` (finetune.max_seq_length, the widest a batch can be)
    with -inf past each feature's own tokens: the teacher gives no probability there. Where the
    targets have that axis too (`by_position`: token classification's, which its collate cuts to the
    batch's width) each position's target sits beside the teacher's logits there ([N, width, 1 +
    labels]); otherwise a row is the targets and the logits flattened ([N, targets + outputs])."""
    hard = torch.tensor(np.asarray(task.train_targets), dtype=torch.float32)
    soft = torch.tensor(teacher.logits, dtype=torch.float32)
    if soft.ndim > 2:
        soft = own_tokens(soft, [len(ids) for ids, _ in task.train], width)
    if by_position:
        return torch.cat([hard.unsqueeze(-1), soft], dim=-1), Packing(tuple(soft.shape[2:]), flat=True)
    packed = torch.cat([hard.reshape(len(task.train), -1), soft.flatten(1)], dim=1)
    return packed, Packing(tuple(soft.shape[1:]), flat=hard.ndim == 1)


def own_tokens(logits: torch.Tensor, lengths: list[int], width: int) -> torch.Tensor:
    """[N, S, ...] logits as [N, width, ...], -inf past each feature's `lengths` tokens."""
    out = logits.new_full((len(logits), width, *logits.shape[2:]), -math.inf)
    out[:, : logits.shape[1]] = logits[:, :width]
    beyond = torch.arange(width)[None, :] >= torch.tensor(lengths)[:, None]
    out[beyond] = -math.inf
    return out


__all__ = ["Packing", "Teacher", "build_student", "own_tokens", "packed_targets", "student_depth", "teacher_scores"]
