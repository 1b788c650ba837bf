"""A fine-tuned export applied to rows by its task family, whichever it is: the family its folder
records (config.json's albert_ray; a folder without the record: the family of its head, told apart
by transformers' problem_type and labels where families share one), what applying it needs
(ModelUse), and the model run over the family's features: the family encodes the rows, its
training `collate` batches the features (sorted by length, so that a batch pads to its own longest)
and its `scores` read the model's outputs, as the fine-tuning's evaluation runs them
(loop.predict), and the family turns the outputs into each row's prediction."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from albert_model.depths import ExitRule, early_exit
from albert_model.hf import load_hf_pretrained

from ..config.sections import PRECISIONS, resolved_precision
from ..errors import BadInput
from ..finetuning.families import FAMILIES
from ..finetuning.family import Family, TaskFamily
from ..finetuning.inference import Encoded, FamilyInference, ModelUse
from ..finetuning.loop import predict
from ..finetuning.tokenizer import PairTokenizer
from ..storage.models import RECORD, TOKENIZER_FILES, applied_length, read_model_config, read_usage
from .onnx_runner import OnnxRunner


def family_of(config: Mapping[str, Any], where: str) -> Family:
    """The family whose export `where` (its config.json: `config`) is; BadInput where none is."""
    architecture = (config.get("architectures") or ["?"])[0]
    usage = read_usage(dict(config), where)
    if usage is not None:
        family = FAMILIES.get(usage.task)
        if family is None or family.architecture != architecture:
            raise BadInput(
                f"{where}: config.json's {RECORD} records task {usage.task!r} for its {architecture} head, which "
                f"no task family here fine-tunes (the families: {', '.join(FAMILIES)})"
            )
        return family
    heads = [f for f in FAMILIES.values() if f.architecture == architecture]
    for family in heads:
        if family.unrecorded is None or family.unrecorded(config):
            return family
    raise BadInput(
        f"{where}: an export of {architecture}; predict serves the task families' fine-tuned exports "
        f"({', '.join(dict.fromkeys(f.architecture for f in FAMILIES.values()))}); its encoder's sentence "
        "vectors: predict.output_kind=embedding, serve's POST <route>/embed"
    )


def inference_of(family: Family, where: str) -> FamilyInference:
    """The family's inference; BadInput naming the export where the family declares none."""
    if family.inference is None:
        raise BadInput(
            f"{where}: a {family.name} export ({family.architecture}); predict and serve do not apply "
            "that family's exports (its predictions are the finetune stage's predictions files)"
        )
    return family.load_inference()


def exit_rule_of(
    family: Family, inference: FamilyInference, patience: int | None, entropy: float | None, where: str, onnx: bool
) -> ExitRule | None:
    """The early-exit rule of `patience` or `entropy` for the family's prediction (None: neither is
    set); BadInput naming `where` where the family reads no head at every depth, where its
    prediction cannot settle (its `exit_rule` says why), or where an ONNX graph runs the model."""
    if patience is None and entropy is None:
        return None
    exit_rule = getattr(inference, "exit_rule", None)
    if exit_rule is None:
        raise BadInput(f"{where}: a {family.name} export; early exit reads a sequence head at every depth")
    if onnx:
        raise BadInput(f"{where}: early exit runs the model's depths one by one; an ONNX graph runs them all")
    return exit_rule(patience, entropy)


def label_names(config: Mapping[str, Any]) -> list[str] | None:
    """config.json's id2label in id order; None where it has none."""
    labels = config.get("id2label") or {}
    return [labels[k] for k in sorted(labels, key=int)] if labels else None


def model_use(config: Mapping[str, Any], tokenizer: PairTokenizer, max_seq_length: int, where: str) -> ModelUse:
    usage = read_usage(dict(config), where)
    return ModelUse(
        tokenizer=tokenizer,
        max_seq_length=max_seq_length,
        label_names=label_names(config),
        settings=dict(usage.settings) if usage is not None else {},
        problem_type=config.get("problem_type"),
    )


def use_of_files(files: Mapping[str, bytes], config: Mapping[str, Any], max_seq_length: int, where: str) -> ModelUse:
    """The ModelUse of a model folder's files (storage.models.read_model_files) where no model is
    loaded (a driver): its tokenizer read from a scratch copy of the tokenizer's files alone."""
    with tempfile.TemporaryDirectory(prefix="albert-tokenizer-") as scratch:
        for name in TOKENIZER_FILES:
            if name in files:
                with open(os.path.join(scratch, name), "wb") as f:
                    f.write(files[name])
        return model_use(config, PairTokenizer(scratch), max_seq_length, where)


def model_dtype(precision: str, device: torch.device) -> torch.dtype:
    """The dtype of `precision` on `device`, auto resolved as pretraining and fine-tuning resolve it
    (config.sections.resolved_precision): bf16 on a GPU (its matrix units' rate, half the bytes of
    fp32), fp32 on a CPU (without AMX its bf16 is no faster, and fp32 answers match the ONNX exports')."""
    if precision not in PRECISIONS:
        raise BadInput(f"precision: {precision!r} is not one of {', '.join(PRECISIONS)}")
    return torch.bfloat16 if resolved_precision(precision, device.type == "cuda") == "bf16" else torch.float32


def placed(
    onnx: str | None,
    outputs: tuple[str, ...],
    device: str | None,
    load: Callable[[], nn.Module],
    precision: str = "auto",
) -> tuple[nn.Module, torch.device]:
    """What runs a model and where: the ONNX file `onnx` in onnxruntime on CPU (its `outputs`),
    else `load()`'s module on `device` (by default a GPU where there is one), in eval mode, its
    weights in `precision`'s dtype (model_dtype)."""
    if onnx is not None:
        return OnnxRunner(onnx, outputs, torch.get_num_threads()), torch.device("cpu")
    target = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return load().to(target, model_dtype(precision, target)).eval(), target


EXIT_DEPTH = "exit_depth"
"""The output column of early exit: the depth (applications of the shared layer) a row was answered at."""


class EarlyExit(nn.Module):
    """A sequence head under an exit rule, as loop.predict calls a model: (B, labels + 1), each
    row's logits at its exit depth and that depth last."""

    def __init__(self, model: nn.Module, rule: ExitRule):
        super().__init__()
        self.model, self.rule = model, rule

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        logits, depths = early_exit(self.model, self.rule, **inputs)
        return torch.cat([logits, depths[:, None].to(logits.dtype)], dim=1)


@dataclass
class Predictor:
    """A loaded export and its family: `predict(rows)` -> one output dict per row (checked rows:
    `check_row` says why one cannot be predicted). `model` is what runs the head: the folder's
    weights in PyTorch, or an ONNX export of it in onnxruntime (onnx_runner.OnnxRunner), called alike."""

    family: Family
    inference: FamilyInference
    training: TaskFamily
    model: nn.Module
    use: ModelUse
    batch_size: int = 64
    device: torch.device = torch.device("cpu")
    exit_rule: ExitRule | None = None
    """Early exit (albert_model/depths.py): each row answered at the depth the rule stops it at,
    reported as its `exit_depth`; None: every row at full depth."""
    max_batch_tokens: int | None = None
    """The most padded tokens in one forward pass (loop.length_batches); None: rows alone bound it."""

    @classmethod
    def load(
        cls,
        model_dir: str,
        max_seq_length: int | None = None,
        batch_size: int = 64,
        device: str | None = None,
        onnx: str | None = None,
        exit_patience: int | None = None,
        exit_entropy: float | None = None,
        max_batch_tokens: int | None = None,
        precision: str = "auto",
    ) -> Predictor:
        """The local folder's model; `max_seq_length` None: storage.models.applied_length's default;
        `onnx`: a local ONNX export of it (onnx_runner.check_onnx), run instead of its weights, on CPU.
        `exit_patience` or `exit_entropy`: early exit, where the family's prediction can settle
        before the last depth (its inference's `exit_rule`; the torch model only). `precision`: what
        the torch model computes in (PRECISIONS; auto: bf16 on a GPU, fp32 on a CPU)."""
        config = read_model_config(model_dir, "model")
        family = family_of(config, model_dir)
        inference = inference_of(family, model_dir)
        tokenizer = PairTokenizer(model_dir)
        trained = tokenizer.model_max_length
        length = applied_length(config, max_seq_length, "max_seq_length", model_dir, tokenizer=trained)
        training = family.load_training()
        model, target = placed(
            onnx, family.outputs, device, lambda: load_hf_pretrained(model_dir, training.model_class), precision
        )
        use = model_use(config, tokenizer, length, model_dir)
        rule = exit_rule_of(family, inference, exit_patience, exit_entropy, model_dir, onnx is not None)
        return cls(family, inference, training, model, use, batch_size, target, rule, max_batch_tokens)

    @property
    def output(self) -> dict[str, Any]:
        """Each row's output columns and their types: the family's, and `exit_depth` when exiting early."""
        return {**self.inference.output, **({EXIT_DEPTH: pa.int32()} if self.exit_rule is not None else {})}

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        return self.inference.check_row(row)

    def encode(self, rows: Sequence[Mapping[str, Any]]) -> Encoded:
        return self.inference.encode(rows, self.use)

    def outputs(self, encoded: Encoded) -> np.ndarray:
        """The family's scores of every feature, in order, padded along dimension 1 to the widest batch
        (exiting early: each feature's logits and, last, the depth it exited at)."""
        return predict(
            self.model if self.exit_rule is None else EarlyExit(self.model, self.exit_rule),
            encoded.features,
            self.batch_size,
            self.use.tokenizer.pad_id,
            device=self.device,
            scores_of=self.training.scores,
            collate_fn=self.training.collate,
            max_tokens=self.max_batch_tokens,
        )

    def answers(self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: np.ndarray) -> list[dict[str, Any]]:
        return self.inference.predictions(rows, encoded, outputs, self.use)

    def run(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """Each row's output dict, and the rows (by index) that encoding rejected, with the reason
        (their outputs are null)."""
        if not rows:
            return [], {}
        encoded = self.encode(rows)
        outputs = self.outputs(encoded) if encoded.features else np.zeros((0, 0), np.float32)
        if self.exit_rule is None:
            return self.answers(rows, encoded, outputs), dict(encoded.rejected)
        answers = self.answers(rows, encoded, outputs[:, :-1])
        depths = dict(zip(encoded.owners, outputs[:, -1].astype(int).tolist()))  # a sequence row: one feature
        return [{**a, EXIT_DEPTH: depths.get(i)} for i, a in enumerate(answers)], dict(encoded.rejected)

    def predict(self, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return self.run(rows)[0]


__all__ = [
    "placed",
    "model_dtype",
    "exit_rule_of",
    "EXIT_DEPTH",
    "EarlyExit",
    "Predictor",
    "family_of",
    "inference_of",
    "label_names",
    "model_use",
    "use_of_files",
]
