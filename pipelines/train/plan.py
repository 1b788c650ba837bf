"""What a pretraining run is: the frozen plan handed to every worker, the check of a split's
parquet schema, and the metrics and manifest fields a run leaves. The driver makes the plan from
the run directory (pipelines/stages/pretrain_plan.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pyarrow.parquet as pq

from albert_model import AlbertConfig

from ..config import Config, TrainSection
from ..errors import BadInput
from ..prep.masking import MaskingSpec
from ..prep.process import example_schema
from ..storage import join, read_json, read_jsonl
from ..storage.models import check_weights, read_model_config
from ..tracking import TrackingPlan
from .input import split_files

METRICS = "metrics.jsonl"
RESOLVED = "resolved.json"  # the arithmetic a run trains with: {use_gpu, precision}


@dataclass(frozen=True)
class PretrainPlan:
    """Everything a pretraining worker needs, checked by the driver before any worker starts."""

    albert: AlbertConfig
    train: TrainSection
    use_gpu: bool
    precision: str
    """bf16 or fp32 (train.precision with auto resolved)."""
    masking: MaskingSpec | None
    """Drawn in the loader (data.masking=dynamic); None when the masks are in the data."""
    max_predictions: int
    n_train: int
    n_validation: int
    batches_per_epoch: int
    data_dir: str
    """The data stage's output: its train/ and validation/ parquet splits."""
    out_dir: str
    """Where the run writes: the folder being built (metrics, checkpoints, export)."""
    spiece_model: str | None
    """The vocabulary, copied into the export (None: an export without a tokenizer)."""
    max_seq_length: int
    """The data's data.max_seq_length: the exported tokenizer's model_max_length."""
    initial_checkpoint: str | None = None
    """The complete output's checkpoint that a raised train.max_steps continues from."""
    tracking: TrackingPlan | None = None
    """The run's trackers, which rank 0 opens and logs metrics.jsonl's lines to; None: tracking off."""
    sentence_objective: str = "sop"
    """The data's data.sentence_objective: sop or nsp train the sentence head, none leaves it untrained."""


def albert_config_of(config: Config, vocab_size: int) -> AlbertConfig:
    """The model to train: train.init_from's architecture when set, else the model section's."""
    if config.train.init_from is None:
        return config.model.albert_config(vocab_size)
    albert = AlbertConfig.from_hf_dict(read_model_config(config.train.init_from, "train.init_from"))
    check_weights(config.train.init_from, "train.init_from")  # here, not in every worker
    return albert


def check_schema(split_dir: str, dynamic: bool, labelled: bool = True) -> None:
    """The first parquet file of a split has the data stage's columns and types (`labelled`: with
    the sentence objective's label)."""
    fs, files = split_files(split_dir)
    with fs.open_input_file(files[0]) as f:
        schema = pq.read_schema(f)
    for expected in example_schema(dynamic, labelled):
        if expected.name not in schema.names:
            raise BadInput(
                f"{files[0]}: column {expected.name!r} missing (found {schema.names}); "
                "the data was written by another version: rerun the data stage"
            )
        if schema.field(expected.name).type != expected.type:
            raise BadInput(
                f"{files[0]}: column {expected.name!r} has type {schema.field(expected.name).type}, "
                f"expected {expected.type}"
            )


def read_metrics(path: str, up_to_step: int) -> list[dict]:
    """Lines of an earlier attempt up to the step it is resumed from (later ones are redone)."""
    return [r for r in read_jsonl(path) if r["step"] <= up_to_step and not r.get("final")]


def segments(records: list[dict], final_step: int) -> list[dict]:
    """The runs the model went through, from the metrics' start/resume/continue events: each with
    its first step, last step, total (max_steps) and workers."""
    events = [r for r in records if r.get("event")]
    return [
        {
            "event": e["event"],
            "start_step": e["step"],
            "end_step": events[i + 1]["step"] if i + 1 < len(events) else final_step,
            "max_steps": e.get("max_steps"),
            "num_workers": e.get("num_workers"),
        }
        for i, e in enumerate(events)
    ]


def manifest_fields(plan: PretrainPlan, config: Config, checkpoint: str | None) -> dict:
    """The pretrain stage's own manifest fields, once the run is complete."""
    train = plan.train
    return {
        "steps": train.max_steps,
        "sequences_seen": train.max_steps * train.global_batch_size,
        "epochs": train.max_steps / plan.batches_per_epoch,
        "num_workers": train.num_workers,
        "use_gpu": plan.use_gpu,
        "precision": plan.precision,
        "sentence_objective": plan.sentence_objective,
        "model": dataclasses.asdict(plan.albert),
        "eval": read_json(join(plan.out_dir, "eval.json")),
        "checkpoint": checkpoint,
        "segments": segments(read_jsonl(join(plan.out_dir, METRICS)), train.max_steps),
        "config": dataclasses.asdict(config),
    }


__all__ = [
    "METRICS",
    "PretrainPlan",
    "albert_config_of",
    "check_schema",
    "manifest_fields",
    "read_metrics",
    "segments",
]
