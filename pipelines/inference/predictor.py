"""A fine-tuned sequence model (the finetune stage's export, or any transformers ALBERT folder of
AlbertForSequenceClassification) applied to texts: its predictions as the fine-tuning stage
scores them (a class name, a number, or a list of classes) and the probabilities behind them.

Rows are encoded as fine-tuning encodes them (PairTokenizer: AlbertTokenizer's ids, longest-first
truncation, by default at the length the model was fine-tuned at) and sorted by length before
batching, so a batch pads to its own longest row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertForSequenceClassification

from ..errors import BadInput
from ..finetuning.tokenizer import PairTokenizer, pad_batch
from ..storage.models import applied_length, read_model_config

SERVED = {"AlbertForSequenceClassification"}
"""The architectures predict serves; the other families' exports are refused by name."""
KINDS = ("classification", "regression", "multi_label")


def model_kind(config: dict[str, Any], model_dir: str) -> tuple[str, list[str] | None]:
    """(kind, label names) of an export's config.json; an export predict does not serve is BadInput."""
    architecture = (config.get("architectures") or ["?"])[0]
    if architecture not in SERVED:
        raise BadInput(
            f"{model_dir}: a {architecture} export; predict serves sequence classification, regression and "
            "multi-label exports (AlbertForSequenceClassification); question answering, token classification "
            "and multiple choice are scored by the finetune stage's predictions files"
        )
    labels = config.get("id2label") or {}
    names = [labels[k] for k in sorted(labels, key=int)] if labels else None
    problem = config.get("problem_type")
    if problem == "multi_label_classification":
        kind = "multi_label"
    elif problem == "regression" or config.get("num_labels", len(names or [])) == 1:
        kind = "regression"
    else:
        kind = "classification"
    return kind, (None if kind == "regression" else names)


@dataclass
class Predictor:
    """A loaded export: `predict(texts, pairs)` -> one {"prediction", "probabilities"} per text."""

    model: nn.Module
    tokenizer: PairTokenizer
    kind: str
    label_names: list[str] | None
    max_seq_length: int
    batch_size: int = 64
    device: torch.device = torch.device("cpu")

    @classmethod
    def load(
        cls, model_dir: str, max_seq_length: int | None = None, batch_size: int = 64, device: str | None = None
    ) -> Predictor:
        """The local folder's model; `max_seq_length` None: storage.models.applied_length's default."""
        config = read_model_config(model_dir, "model")
        kind, names = model_kind(config, model_dir)
        length = applied_length(config, max_seq_length, "max_seq_length", model_dir)
        target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        model = load_hf_pretrained(model_dir, AlbertForSequenceClassification).to(target).eval()
        return cls(model, PairTokenizer(model_dir), kind, names, length, batch_size, target)

    def encode(self, texts: list[str], pairs: list[str] | None = None) -> list[tuple[list[int], list[int]]]:
        pairs = pairs if pairs is not None else [None] * len(texts)
        return [self.tokenizer.encode(t, p, self.max_seq_length) for t, p in zip(texts, pairs)]

    @torch.inference_mode()
    def logits(self, encoded: list[tuple[list[int], list[int]]]) -> np.ndarray:
        """[N, num_labels] float32 logits, in the order given; batches of similar lengths."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
        out = np.zeros((len(encoded), self.model.config.num_labels), np.float32)
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            batch = pad_batch([encoded[i] for i in rows], self.tokenizer.pad_id)
            inputs = {k: torch.from_numpy(v).to(self.device) for k, v in batch.items()}
            out[rows] = self.model(**inputs).float().cpu().numpy()
        return out

    def outputs(self, logits: np.ndarray) -> list[dict[str, Any]]:
        """Each row's prediction (the class name, the number, or the list of classes whose sigmoid
        passes 0.5) and probabilities (softmax per class, sigmoid per class; none for regression)."""
        if self.kind == "regression":
            return [{"prediction": float(row[0]), "probabilities": None} for row in logits]
        names = self.label_names or [str(i) for i in range(logits.shape[1])]
        if self.kind == "multi_label":
            probabilities = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
            return [
                {"prediction": [n for n, p in zip(names, row) if p > 0.5], "probabilities": row.tolist()}
                for row in probabilities
            ]
        shifted = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
        probabilities = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
        return [{"prediction": names[int(row.argmax())], "probabilities": row.tolist()} for row in probabilities]

    def predict(self, texts: list[str], pairs: list[str] | None = None) -> list[dict[str, Any]]:
        return self.outputs(self.logits(self.encode(texts, pairs)))


__all__ = ["KINDS", "SERVED", "Predictor", "model_kind"]
