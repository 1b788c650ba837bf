"""A fine-tuned model (an exported folder) scored on an encoded task's evaluation features, as a
trial scores its epochs: the best model on further evaluation files (finetune.extra_eval_paths)."""

from __future__ import annotations

import torch

from albert_model.hf import load_hf_pretrained

from ..config import FinetuneSection
from .families import task_family
from .family import Evaluation
from .loop import predict, resolve_precision
from .trial import TrialData


def evaluate_model(
    cfg: FinetuneSection, data: TrialData, model_dir: str, device: torch.device | None = None
) -> Evaluation:
    """The family's metrics and predictions files for `model_dir` (its head class) on `data`'s eval features."""
    device = device or torch.device("cpu")
    family = task_family(data.task)
    model = load_hf_pretrained(model_dir, family.model_class).to(device).eval()
    scores = predict(
        model,
        data.encoded.eval,
        cfg.eval_batch_size,
        data.pad_id,
        device=device,
        precision=resolve_precision(cfg.precision, device),
        scores_of=family.scores,
        collate_fn=family.collate,
    )
    return family.evaluate(cfg, data.encoded, scores)


__all__ = ["evaluate_model"]
