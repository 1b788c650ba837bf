"""Multiple choice applied to rows (pipelines/finetuning/inference.py): a `question`, an optional
`context` and its `choices` (a list of two or more texts; rows may have different numbers), each
choice encoded as fine-tuning encodes it (training.encode_question: run_swag's pairs, texts
stripped); `prediction` is the index of the choice with the highest score, as predictions.jsonl
says it, and `probabilities` the softmax over the row's choices. A gold label is an index or a
letter (A = 0), as the fine-tuning files give it.

Rejections (check_row), in the order of the fields: `not_a_string` (a question or context that is
not text), `missing_choices`, `not_a_list_of_strings` (choices that are not a list of texts),
`too_few_choices` (fewer than two), `empty_choice` (a blank one), `empty_question` (neither a
question nor a context)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import PredictSection
from ...inference import Encoded, ModelUse
from .reading import choice_index


def _text(value: Any) -> str:
    return (value or "").strip()  # as reading.py's questions keep them


class MultipleChoiceInference:
    fields = ("question", "context", "choices")
    required = ("choices",)
    output = {"prediction": pa.int64(), "probabilities": pa.list_(pa.float64())}

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        if any(row.get(f) is not None and not isinstance(row.get(f), str) for f in ("question", "context")):
            return "not_a_string"
        choices = row.get("choices")
        if choices is None:
            return "missing_choices"
        if not isinstance(choices, list | tuple) or not all(isinstance(c, str) for c in choices):
            return "not_a_list_of_strings"
        if len(choices) < 2:
            return "too_few_choices"
        if any(not c.strip() for c in choices):
            return "empty_choice"
        if not _text(row.get("question")) and not _text(row.get("context")):
            return "empty_question"
        return None

    def encode(self, rows: Sequence[Mapping[str, Any]], use: ModelUse) -> Encoded:
        from .training import encode_question  # torch: not imported where rows are only checked

        features = [
            encode_question(
                use.tokenizer,
                _text(row.get("context")),
                _text(row.get("question")),
                [c.strip() for c in row["choices"]],
                use.max_seq_length,
            )
            for row in rows
        ]
        return Encoded(features, list(range(len(rows))))

    def predictions(
        self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: np.ndarray, use: ModelUse
    ) -> list[dict[str, Any]]:
        out = []
        for row, scores in zip(rows, outputs.astype(np.float64)):
            logits = scores[: len(row["choices"])]  # a batch's filler choices and the padding after them
            shifted = np.exp(logits - logits.max())
            out.append({"prediction": int(logits.argmax()), "probabilities": (shifted / shifted.sum()).tolist()})
        return out

    def read_file(self, path: str, data: bytes) -> None:
        return None  # tables only: jsonl or parquet, whose cells hold lists

    def metrics(
        self, labels: Sequence[Any], predictions: Sequence[Mapping[str, Any]], use: ModelUse, section: PredictSection
    ) -> dict[str, Any]:
        """Accuracy and eval_loss as the fine-tuning evaluates them, on rows whose gold label names
        one of their choices (`label_not_a_choice` counts the others)."""
        right, losses, unknown = [], [], 0
        for gold, prediction in zip(labels, predictions):
            probabilities = prediction["probabilities"]
            index = choice_index(gold, len(probabilities))
            if index is None:
                unknown += 1
                continue
            right.append(prediction["prediction"] == index)
            losses.append(-np.log(max(probabilities[index], 1e-300)))
        scored = {"accuracy": float(np.mean(right)), "eval_loss": float(np.mean(losses))} if right else {}
        return {"rows": len(right), "label_not_a_choice": unknown, **scored}


INFERENCE = MultipleChoiceInference()

__all__ = ["INFERENCE", "MultipleChoiceInference"]
