"""A classifier applied to rows (over _sequence/inference.py): `prediction`, the class with the
highest logit, by name; `probabilities`, the softmax over the classes in label order."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from albert_model.depths import ExitRule

from ....config import PredictSection
from .._sequence.inference import SequenceInference
from . import FAMILY


class ClassificationInference(SequenceInference):
    family = FAMILY
    output = {"prediction": pa.string(), "probabilities": pa.list_(pa.float64())}

    def exit_rule(self, patience: int | None, entropy: float | None) -> ExitRule:
        return ExitRule(patience, entropy)

    def probabilities(self, logits: np.ndarray) -> list[list[float]]:
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        return (shifted / shifted.sum(axis=1, keepdims=True)).tolist()

    def target(self, gold: Any, names: list[str] | None, section: PredictSection) -> int | None:
        return names.index(str(gold)) if str(gold) in names else None

    def logits(self, prediction: Mapping[str, Any]) -> list[float]:
        return np.log(np.clip(np.asarray(prediction["probabilities"]), 1e-300, None)).tolist()  # softmax(log p) = p


INFERENCE = ClassificationInference()

__all__ = ["INFERENCE", "ClassificationInference"]
