"""A regression applied to rows (over _sequence/inference.py): `prediction`, the number (the
single logit); `probabilities` null."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import PredictSection
from ...inference import ModelUse
from .._sequence.inference import SequenceInference
from . import FAMILY


class RegressionInference(SequenceInference):
    family = FAMILY
    output = {"prediction": pa.float64(), "probabilities": pa.list_(pa.float64())}

    def names(self, use: ModelUse, count: int) -> None:
        return None  # a number has no classes

    def probabilities(self, logits: np.ndarray) -> list[None]:
        return [None] * len(logits)

    def target(self, gold: Any, names: list[str] | None, section: PredictSection) -> float | None:
        try:
            return float(gold)
        except (TypeError, ValueError):
            return None

    def logits(self, prediction: Mapping[str, Any]) -> list[float]:
        return [prediction["prediction"]]


INFERENCE = RegressionInference()

__all__ = ["INFERENCE", "RegressionInference"]
