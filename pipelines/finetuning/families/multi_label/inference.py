"""A multi-label classifier applied to rows (over _sequence/inference.py): `prediction`, the classes
whose logit is positive (sigmoid above 0.5), in label order; `probabilities`, the sigmoid per class.
A gold label is a list, or text split at predict.label_delimiter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from albert_model.depths import ExitRule

from ....config import PredictSection
from .._sequence.inference import SequenceInference
from . import FAMILY


class MultiLabelInference(SequenceInference):
    family = FAMILY
    output = {"prediction": pa.list_(pa.string()), "probabilities": pa.list_(pa.float64())}

    def exit_rule(self, patience: int | None, entropy: float | None) -> ExitRule:
        return ExitRule(patience, entropy, independent=True)

    def probabilities(self, logits: np.ndarray) -> list[list[float]]:
        return (1.0 / (1.0 + np.exp(-logits))).tolist()

    def target(self, gold: Any, names: list[str] | None, section: PredictSection) -> list[int] | None:
        delimiter = section.label_delimiter
        classes = gold if isinstance(gold, list) else [c.strip() for c in str(gold).split(delimiter) if c.strip()]
        if any(str(c) not in names for c in classes):
            return None
        return [int(n in {str(c) for c in classes}) for n in names]

    def logits(self, prediction: Mapping[str, Any]) -> list[float]:
        p = np.clip(np.asarray(prediction["probabilities"]), 1e-12, 1 - 1e-12)
        return np.log(p / (1 - p)).tolist()  # the logits behind the sigmoids


INFERENCE = MultiLabelInference()

__all__ = ["INFERENCE", "MultiLabelInference"]
