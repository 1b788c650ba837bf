"""The sequence task families: classification, regression and multi-label classification of a
text or text pair from [CLS] (transformers' AlbertForSequenceClassification), scored with
accuracy, macro-F1 and MCC (and for two classes F1 of the second); Pearson and Spearman; micro-
and macro-F1 and subset accuracy."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from albert_model.model import AlbertForSequenceClassification

from ..config import TUNE_METRICS, FinetuneSection
from ..config.tuning import MULTI_LABEL
from .family import EncodedTask, Evaluation
from .loop import collate
from .metrics import compute_metrics
from .task import load_task
from .tokenizer import PairTokenizer


@dataclass(frozen=True)
class SequenceFamily:
    name: str
    model_class: type = AlbertForSequenceClassification
    collate = staticmethod(collate)

    @property
    def metrics(self) -> tuple[str, ...]:
        return TUNE_METRICS[self.name]

    @property
    def regression(self) -> bool:
        return self.name == "regression"

    @property
    def multi_label(self) -> bool:
        return self.name == MULTI_LABEL

    @property
    def problem_type(self) -> str | None:
        """multi_label: BCE per class (transformers' "multi_label_classification"); the others are
        what transformers infers from num_labels (1: regression) and the labels' dtype."""
        return "multi_label_classification" if self.multi_label else None

    @property
    def target_dtype(self) -> torch.dtype:
        return torch.long if self.name == "classification" else torch.float32

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        task = load_task(cfg)
        length = cfg.max_seq_length

        def encode(examples) -> list[tuple[list[int], list[int]]]:
            pairs = examples.pairs if examples.pairs is not None else [None] * len(examples)
            return [tokenizer.encode(text, pair, length) for text, pair in zip(examples.texts, pairs)]

        train, evaluation = encode(task.train), encode(task.eval)
        return EncodedTask(
            train=train,
            train_targets=np.asarray(task.train_targets),
            eval=evaluation,
            eval_targets=np.asarray(task.eval_targets),
            reference=list(task.eval.rows),  # each eval example's row in its source: its id in predictions.jsonl
            label_names=task.label_names,
            num_labels=task.num_labels,
            accounting=task.accounting,
            truncated={
                split: sum(len(ids) >= length for ids, _ in features)
                for split, features in (("train", train), ("eval", evaluation))
            },
            eval_examples=len(evaluation),
        )

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = outputs.float()  # the loss in fp32 under bf16 autocast
        if self.regression:
            return F.mse_loss(logits[:, 0], targets.float(), reduction="sum")
        if self.multi_label:
            # transformers' BCEWithLogitsLoss averages over examples and classes: summed over the
            # batch's examples, each example's mean over its classes
            return F.binary_cross_entropy_with_logits(logits, targets.float(), reduction="sum") / logits.shape[1]
        return F.cross_entropy(logits, targets, reduction="sum")

    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs  # logits [B, num_labels]

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        metrics = compute_metrics(self.name, scores, task.eval_targets, task.num_labels)
        return Evaluation(metrics, {"predictions.jsonl": predictions_jsonl(self, task, scores)})


def predictions_jsonl(family: SequenceFamily, task: EncodedTask, scores: np.ndarray) -> str:
    """A line per eval example: its row in its source (`id`) and the prediction: a class name, a
    number (regression) or the list of classes whose logit is positive (multi_label)."""
    names = task.label_names
    if family.regression:
        predicted = [float(row[0]) for row in scores]
    elif family.multi_label:
        predicted = [[names[j] for j in np.flatnonzero(row > 0)] for row in scores]
    else:
        predicted = [names[int(j)] for j in np.asarray(scores).argmax(1)]
    ids = task.reference if task.reference is not None else range(len(predicted))  # a task made without rows: positions
    return "".join(json.dumps({"id": int(i), "prediction": p}) + "\n" for i, p in zip(ids, predicted))


CLASSIFICATION = SequenceFamily("classification")
REGRESSION = SequenceFamily("regression")
MULTI_LABEL_CLASSIFICATION = SequenceFamily(MULTI_LABEL)

__all__ = ["CLASSIFICATION", "MULTI_LABEL_CLASSIFICATION", "REGRESSION", "SequenceFamily"]
