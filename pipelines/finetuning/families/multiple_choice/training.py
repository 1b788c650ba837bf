"""The multiple-choice family (SWAG, RACE, or any question with a fixed number of answers): each
choice is scored from its own `[CLS] context [SEP] question choice [SEP]`, as transformers'
run_swag pairs them (AlbertForMultipleChoice: one score per choice from [CLS]), the choices of a
question compete in one softmax, and the metric is accuracy. The readers: reading.py."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ....errors import BadInput
from ...distill_losses import softmax_kl_sum
from ...family import Baseline, EncodedTask, Evaluation
from ...loop import collate as single_collate
from ...splits import Units, train_and_eval
from ...tokenizer import PairTokenizer
from . import FAMILY
from .reading import Questions, read_questions, sample_questions, split_questions

Choices = list[tuple[list[int], list[int]]]
"""One question's features: (input_ids, token_type_ids) per choice."""


def encode_question(
    tokenizer: PairTokenizer, context: str, question: str, choices: Sequence[str], length: int
) -> Choices:
    """Per choice: the context as the first segment, `question choice` as the second (run_swag's
    pairs; without a context, `question` first and the choice second), truncated longest first."""
    if context:
        return [tokenizer.encode(context, f"{question} {choice}".strip(), length) for choice in choices]
    return [tokenizer.encode(question, choice, length) for choice in choices]


def encode_split(tokenizer: PairTokenizer, questions: Questions, length: int) -> tuple[list[Choices], np.ndarray, int]:
    features = [
        encode_question(tokenizer, c, q, choices, length)
        for c, q, choices in zip(questions.contexts, questions.questions, questions.choices)
    ]
    truncated = sum(len(ids) >= length for choices in features for ids, _ in choices)
    return features, np.asarray(questions.labels, dtype=np.int64), truncated


def collate(
    encoded: Sequence[Choices],
    indices: Sequence[int],
    pad_id: int,
    targets: torch.Tensor | None = None,
    pin: bool = False,
    widths: Sequence[int] = (),
) -> dict[str, torch.Tensor]:
    """The questions at `indices` as [B, choices, S] inputs, every choice padded to the batch's widest.
    A question with fewer choices than the batch's most (predict's rows may differ; a fine-tuning
    file's never do) is filled up with one-token choices, whose scores its prediction never reads."""
    count = max((len(encoded[i]) for i in indices), default=0)
    filler = ([pad_id], [0])
    flat = [choice for i in indices for choice in [*encoded[i], *[filler] * (count - len(encoded[i]))]]
    padded = single_collate(flat, range(len(flat)), pad_id, widths=widths)  # loop.collate's padding, per choice
    batch = {k: v.view(len(indices), count, -1) for k, v in padded.items()}
    if targets is not None:
        batch["labels"] = targets[torch.as_tensor(indices, dtype=torch.long)]
    return {k: v.pin_memory() for k, v in batch.items()} if pin else batch


class MultipleChoiceFamily:
    model_class = FAMILY.model_class
    problem_type = None
    target_dtype = torch.long
    collate = staticmethod(collate)

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        units = Units(
            lambda path: read_questions(path, cfg),
            split_questions,
            sample_questions,
            "questions",
            held_out_as="{fraction:g} of {source} (seed {seed}, by context)",
        )
        splits = train_and_eval(cfg, units)
        train, evaluation = splits.train, splits.evaluation
        counts = {len(train.choices[0]), len(evaluation.choices[0])}
        if len(counts) > 1:
            raise BadInput(
                f"{train.source} has {len(train.choices[0])} choices per question and {evaluation.source} "
                f"{len(evaluation.choices[0])}: the model scores one number of choices"
            )
        train_features, train_targets, train_cut = encode_split(tokenizer, train, cfg.max_seq_length)
        eval_features, eval_targets, eval_cut = encode_split(tokenizer, evaluation, cfg.max_seq_length)
        return EncodedTask(
            train=train_features,
            train_targets=train_targets,
            eval=eval_features,
            eval_targets=eval_targets,
            reference=evaluation.ids,
            num_labels=1,  # one score per choice
            accounting=splits.accounting,
            truncated={"train_choices": train_cut, "eval_choices": eval_cut},
            eval_examples=len(evaluation),
        )

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(outputs.float(), targets, reduction="sum")

    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs  # [B, choices]

    targets_by_position = False

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        """The KL of the choices' softmaxes (every question has the same choices in fine-tuning)."""
        return softmax_kl_sum(outputs, teacher, temperature)

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        logits = torch.from_numpy(np.asarray(scores, dtype=np.float64))
        gold = torch.from_numpy(task.eval_targets)
        predicted = logits.argmax(1)
        metrics = {
            "accuracy": float((predicted == gold).double().mean()) if len(gold) else 0.0,
            "eval_loss": float(F.cross_entropy(logits, gold)) if len(gold) else 0.0,
        }
        lines = [json.dumps({"id": qid, "prediction": int(p)}) + "\n" for qid, p in zip(task.reference, predicted)]
        return Evaluation(metrics, {"predictions.jsonl": "".join(lines)})

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        counts = np.bincount(np.asarray(task.train_targets, dtype=int))
        top = int(counts.argmax()) if len(counts) else 0
        gold = np.asarray(task.eval_targets, dtype=int)
        accuracy = float((gold == top).mean()) if len(gold) else 0.0
        share = counts[top] / max(1, counts.sum()) if len(counts) else 0.0
        return Baseline(
            f"always choice {top}, the most common right one ({share:.0%} of training questions)",
            {"accuracy": accuracy},
        )


MULTIPLE_CHOICE = MultipleChoiceFamily()

__all__ = ["MULTIPLE_CHOICE", "MultipleChoiceFamily", "collate", "encode_question"]
