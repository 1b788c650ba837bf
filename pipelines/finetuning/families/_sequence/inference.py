"""What the sequence families' inference shares (pipelines/finetuning/inference.py): a row is a
`text` and, for a pair, a `text_pair`, encoded as fine-tuning encodes it (PairTokenizer, longest
first, at the length the model was fine-tuned at); its prediction is the fine-tuning's own
(`predicted` of its training.py: what predictions.jsonl says) with the probabilities behind it, and
gold labels are scored with the fine-tuning's metrics. What differs, each family's inference.py says
by subclassing SequenceInference: the prediction's type, the probabilities, and how a gold label
becomes a target.

Rejections (check_row): `missing_text` (no text, or null), `not_a_string` (the text or pair is a
number, a list, ...), `empty_text` and `empty_text_pair` (blank)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from albert_model.depths import ExitRule

from ....errors import BadInput
from ...inference import Encoded, ModelUse

if TYPE_CHECKING:
    from ....config import PredictSection
    from ...family import Family
    from .training import SequenceFamily


class SequenceInference:
    family: Family
    """The subclass's Family, whose fine-tuning says what a prediction is."""
    fields = ("text", "text_pair")
    required = ("text",)
    output: dict[str, pa.DataType]
    """`prediction` (of the family's type) and `probabilities` (a float per class, in label order)."""
    file_suffixes = ()

    @property
    def training(self) -> SequenceFamily:
        return self.family.load_training()  # torch: not imported where rows are only checked

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        for field in self.fields:
            value = row.get(field)
            if value is None:
                if field in self.required:
                    return f"missing_{field}"
            elif not isinstance(value, str):
                return "not_a_string"
            elif not value.strip():
                return f"empty_{field}"
        return None

    def encode(self, rows: Sequence[Mapping[str, Any]], use: ModelUse) -> Encoded:
        features = [use.tokenizer.encode(row["text"], row.get("text_pair"), use.max_seq_length) for row in rows]
        return Encoded(features, list(range(len(rows))))

    def predictions(
        self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: np.ndarray, use: ModelUse
    ) -> list[dict[str, Any]]:
        names = self.names(use, outputs.shape[1])
        predicted = self.training.predicted(outputs, names)
        return [
            {"prediction": p, "probabilities": q}
            for p, q in zip(predicted, self.probabilities(outputs.astype(np.float64)))
        ]

    def exit_rule(self, patience: int | None, entropy: float | None) -> ExitRule:
        """Early exit's rule for this family's prediction (predict.exit_patience, predict.exit_entropy)."""
        raise BadInput("early exit needs classes whose prediction can settle: a number has no argmax")

    def read_file(self, path: str, data: bytes) -> None:
        return None  # tables only

    def names(self, use: ModelUse, count: int) -> list[str] | None:
        """The classes in the logits' order: the export's labels, else their indices."""
        return use.label_names or [str(i) for i in range(count)]

    def probabilities(self, logits: np.ndarray) -> list[list[float] | None]:
        raise NotImplementedError

    def target(self, gold: Any, names: list[str] | None, section: PredictSection) -> Any:
        """The fine-tuning's target of a gold label (predict.label_column's cell), or None where it
        is not one of the model's classes (counted, not scored)."""
        raise NotImplementedError

    def logits(self, prediction: Mapping[str, Any]) -> list[float]:
        """Logits giving the prediction's probabilities (its metrics read logits)."""
        raise NotImplementedError

    def metrics(
        self, labels: Sequence[Any], predictions: Sequence[Mapping[str, Any]], use: ModelUse, section: PredictSection
    ) -> dict[str, Any]:
        """The fine-tuning's metrics on rows with a gold label: `rows` scored, `label_not_a_class`
        counted instead, and the metrics (with eval_loss) as its evaluation computes them."""
        names = self.names(use, len(predictions[0]["probabilities"] or [0])) if predictions else None
        targets, scores, unknown = [], [], 0
        for gold, prediction in zip(labels, predictions):
            target = self.target(gold, names, section)
            if target is None:
                unknown += 1
                continue
            targets.append(target)
            scores.append(self.logits(prediction))
        scored = self.training.metrics_of(np.asarray(scores), np.asarray(targets), len(names or [1])) if targets else {}
        return {"rows": len(targets), "label_not_a_class": unknown, **scored}


__all__ = ["SequenceInference"]
