"""Depth distillation, free of Ray: the student (the fine-tuned teacher's own weights, its shared
layer applied fewer times: no new parameter), the teacher's outputs on the task's features computed
once by the driver, and how a trial receives them (`Teacher`, with the distill settings)."""

from __future__ import annotations

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
    """[train features, outputs]: the teacher's logits, the soft targets."""
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


def packed_targets(task: EncodedTask, teacher: Teacher) -> torch.Tensor:
    """Each training feature's target and its teacher's logits in one float row: the loop batches
    one target tensor (row i: example i), so the soft targets ride along with the hard ones
    through its batching, micro-batches and workers unchanged. Class ids are exact as floats."""
    hard = torch.tensor(np.asarray(task.train_targets), dtype=torch.float32).reshape(len(task.train), -1)
    return torch.cat([hard, torch.tensor(teacher.logits, dtype=torch.float32)], dim=1)


def unpack(targets: torch.Tensor, outputs: int, dtype: torch.dtype, flat: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(the hard targets as the family's loss takes them, the teacher's logits) of packed rows."""
    hard, soft = targets[:, :-outputs], targets[:, -outputs:]
    return (hard[:, 0] if flat else hard).to(dtype), soft


__all__ = ["Teacher", "build_student", "packed_targets", "student_depth", "teacher_scores", "unpack"]
