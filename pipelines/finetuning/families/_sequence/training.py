"""What the sequence families share (a label per text or text pair, read from [CLS]: transformers'
AlbertForSequenceClassification): their task is a table's rows (task.py), encoded as
`[CLS] a [SEP] (b [SEP])`, one padded sequence per example, scored by its logits, and their
predictions file is `predictions.jsonl`, a line per eval example: its row in its source (`id`) and
its prediction. What differs, each family's training.py says by subclassing SequenceFamily: how
the label column becomes targets, the loss, the metrics and what a prediction is."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from ....config import FinetuneSection
from ...family import Baseline, EncodedTask, Evaluation
from ...loop import collate
from ...tables import Examples
from ...tokenizer import PairTokenizer
from .task import load_task, refuse_embedded


class SequenceFamily:
    model_class: type
    """AlbertForSequenceClassification: its Family's head."""
    problem_type: str | None = None
    """transformers infers the loss from num_labels (1: regression) and the labels' dtype; a family
    whose loss it would not infer says it (config.json's `problem_type`)."""
    target_dtype: torch.dtype = torch.float32
    stratified = False
    """Splits and subsamples keep each class's share (a row has one class)."""
    numeric = False
    """The label column holds numbers (one that is not is an error naming the row)."""
    collate = staticmethod(collate)
    targets_by_position = False

    def embedded(self, cfg: FinetuneSection) -> Examples:
        """The task without finetune.train_path."""
        return refuse_embedded(cfg)

    def targets(self, cfg: FinetuneSection, train: Examples, evaluation: Examples) -> tuple[list[str] | None, Any, Any]:
        """(class names or None, train targets, eval targets) of the splits' labels."""
        raise NotImplementedError

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        """The summed loss of a student's outputs against its teacher's (distill_losses.py); `targets`,
        the hard ones, say what a family's own loss counts (a sequence family's: every example)."""
        raise NotImplementedError

    def metrics_of(self, logits: np.ndarray, targets: np.ndarray, num_labels: int) -> dict[str, float]:
        """The eval metrics (and eval_loss) of `logits` [N, num_labels] against the eval targets."""
        raise NotImplementedError

    def predicted(self, scores: np.ndarray, names: list[str] | None) -> list[Any]:
        """Each example's prediction in predictions.jsonl."""
        raise NotImplementedError

    def trivial(self, task: EncodedTask) -> tuple[str, np.ndarray | None]:
        """The trivial predictor learnt from the training targets alone: what it predicts, in words,
        and its logits for every eval example (None where the family's metrics are undefined for it)."""
        raise NotImplementedError

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        predictor, logits = self.trivial(task)
        if logits is None or not len(task.eval_targets):
            return Baseline(predictor, {})
        metrics = self.metrics_of(logits, task.eval_targets, task.num_labels)
        return Baseline(predictor, {k: v for k, v in metrics.items() if k != "eval_loss"})

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        task = load_task(cfg, self)
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

    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs  # logits [B, num_labels]

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        metrics = self.metrics_of(scores, task.eval_targets, task.num_labels)
        predicted = self.predicted(scores, task.label_names)
        gold = self.predicted(self.gold_logits(task), task.label_names)
        return Evaluation(metrics, {"predictions.jsonl": predictions_jsonl(predicted, task, gold)})

    def gold_logits(self, task: EncodedTask) -> np.ndarray:
        """Logits that `predicted` reads as each eval example's gold label."""
        raise NotImplementedError


def predictions_jsonl(predicted: list[Any], task: EncodedTask, gold: list[Any]) -> str:
    """A line per eval example: its row in its source (`id`), its prediction and its gold `label` (in
    the prediction's form: what the report's per-class scores and confusion matrix are counted from)."""
    ids = task.reference if task.reference is not None else range(len(predicted))  # a task made without rows: positions
    return "".join(
        json.dumps({"id": int(i), "prediction": p, "label": g}) + "\n" for i, p, g in zip(ids, predicted, gold)
    )


__all__ = ["SequenceFamily", "predictions_jsonl"]
