"""What a pretraining run is, decided by the driver before any worker starts: the checks on its
inputs (the data and vocabulary manifests, the parquet schema, the batch arithmetic, the GPUs),
the frozen plan handed to every worker, and what it continues or resumes from."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow.parquet as pq

from albert_model import AlbertConfig

from ..config import Config, TrainSection
from ..config.sections import resolved_precision
from ..errors import BadInput, MissingInput
from ..lifecycle import StageRun
from ..models import read_model_config
from ..prep.masking import MaskingSpec
from ..prep.process import example_schema
from ..stages import read_manifest, stage_dir
from ..storage import exists, join, path_inside, read_json, read_jsonl, write_text
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
    fault_step: int = 0
    """Test-only: the last worker exits hard after this step, once per run."""
    hold_steps: tuple[int, ...] = ()
    """Test-only: every worker waits after these steps, once per run, for the test to stop its group."""
    nan_steps: tuple[int, ...] = ()
    """Test-only: the last worker's loss at these steps is NaN (once per step per process)."""
    spike_steps: tuple[int, ...] = ()
    """Test-only: the last worker's loss at these steps is 100 times larger (once per step per process)."""
    skip_steps: tuple[int, ...] = ()
    """Steps whose global batch is skipped (no update; the schedule and the data move on): the tests'
    run that skips a batch by construction."""
    initial_checkpoint: str | None = None
    """The complete output's checkpoint that a raised train.max_steps continues from."""


def _albert_config(config: Config, vocab_size: int) -> AlbertConfig:
    """The model to train: train.init_from's architecture when set, else the model section's."""
    if config.train.init_from is None:
        return config.model.albert_config(vocab_size)
    return AlbertConfig.from_hf_dict(read_model_config(config.train.init_from, "train.init_from"))


def check_schema(split_dir: str, dynamic: bool) -> None:
    """The first parquet file of a split has the data stage's columns and types."""
    fs, files = split_files(split_dir)
    with fs.open_input_file(files[0]) as f:
        schema = pq.read_schema(f)
    for expected in example_schema(dynamic):
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


def resolve_gpu(setting: bool | str, min_workers: int, gpus_now: int, gpus_max: int | None) -> bool:
    """Whether to train on GPUs. `gpus_max`: the most the cluster can have (None: an autoscaler that
    does not say, as the cluster launcher's). auto means GPUs when the cluster has or can have any
    (not "enough": that would make the worker count, a setting, decide the precision of a run); a
    GPU cluster that scales from zero and does not say so needs train.use_gpu=true."""
    can_have = gpus_now if gpus_max is None else max(gpus_now, gpus_max)
    use_gpu = setting if isinstance(setting, bool) else can_have > 0
    if setting == "auto" and not use_gpu and gpus_max is None:
        print(
            "pretrain: train.use_gpu=auto found no GPU in the cluster, and its autoscaler does not say "
            "whether it can add any: training on CPUs (set train.use_gpu=true for GPU nodes that start from zero)",
            flush=True,
        )
    if not use_gpu or can_have >= min_workers:
        return use_gpu
    if gpus_max is None:  # the autoscaler may add them; Ray Train asks it for them and waits
        print(f"pretrain: {gpus_now} GPUs now, waiting for the autoscaler to add {min_workers - gpus_now}", flush=True)
        return use_gpu
    upper = f" (at most {gpus_max} with autoscaling)" if gpus_max != gpus_now else ""
    raise BadInput(
        f"train.use_gpu={str(setting).lower()} with train.num_workers={min_workers} at least, but the cluster has "
        f"{gpus_now} GPUs{upper}" + ("; set train.use_gpu=false to train on CPUs" if setting == "auto" else "")
    )


def plan_pretraining(config: Config, out_dir: str, gpus: tuple[int, int | None], fault_step: int = 0) -> PretrainPlan:
    """Every up-front check, before any worker starts; returns what the workers need. `gpus`: the
    cluster's GPUs now and the most it can have (`resolve_gpu`)."""
    data, data_dir = read_manifest(config, "data"), stage_dir(config, "data")
    if data is None:
        raise MissingInput(
            f"no examples in {data_dir} (no manifest.json): run `python -m pipelines.data` with the same run_dir first"
        )
    n_train, n_validation = data["examples"]["train"], data["examples"]["validation"]
    if n_train == 0:
        raise BadInput(
            f"{data_dir}: the train split is empty (0 examples); check the data stage's manifest for rejected documents"
        )
    vocab = read_manifest(config, "vocab")
    if vocab is None:
        raise MissingInput(f"no vocabulary in {stage_dir(config, 'vocab')}: run `python -m pipelines.vocab`")
    if data.get("vocab_sha256") != vocab["sha256"]:
        raise BadInput(
            f"{data_dir} was made with another vocabulary (sha256 {data.get('vocab_sha256')}) than "
            f"{stage_dir(config, 'vocab')}/spiece.model ({vocab['sha256']}): rerun the data stage"
        )
    dynamic = data["masking"]["mode"] == "dynamic"
    check_schema(join(data_dir, "train"), dynamic)
    if n_validation:
        check_schema(join(data_dir, "validation"), dynamic)
    albert = _albert_config(config, vocab["vocab_size"])
    if albert.vocab_size != vocab["vocab_size"]:
        raise BadInput(
            f"train.init_from={config.train.init_from}: vocab_size {albert.vocab_size} differs from "
            f"the vocabulary's {vocab['vocab_size']} pieces"
        )
    written = data["config"]["data"]  # what the examples were made with
    if written["max_seq_length"] > albert.max_position_embeddings:
        raise BadInput(
            f"data.max_seq_length={written['max_seq_length']} of {data_dir} exceeds "
            f"model.max_position_embeddings={albert.max_position_embeddings}"
        )
    train = config.train
    if train.global_batch_size > n_train:
        raise BadInput(
            f"train.global_batch_size={train.global_batch_size} exceeds the {n_train} training "
            f"examples in {data_dir}: not one full batch"
        )
    eval_batch = max(train.micro_batch(w) * w for w in train.worker_counts)
    if n_validation < eval_batch:
        raise BadInput(
            f"{data_dir}: {n_validation} validation examples, fewer than one evaluation batch "
            f"(workers x micro batch = {eval_batch}); raise data.validation_fraction"
        )
    use_gpu = resolve_gpu(train.use_gpu, train.min_workers, *gpus)
    masking = (
        MaskingSpec(
            written["masked_lm_prob"], written["max_predictions_per_seq"], written["ngram"], vocab["vocab_size"]
        )
        if dynamic
        else None
    )
    return PretrainPlan(
        albert=albert,
        train=train,
        use_gpu=use_gpu,
        precision=resolved_precision(train.precision, use_gpu),
        masking=masking,
        max_predictions=written["max_predictions_per_seq"],
        n_train=n_train,
        n_validation=n_validation,
        batches_per_epoch=n_train // train.global_batch_size,
        data_dir=data_dir,
        out_dir=out_dir,
        spiece_model=join(stage_dir(config, "vocab"), "spiece.model"),
        fault_step=fault_step,
    )


def read_metrics(path: str, up_to_step: int) -> list[dict]:
    """Lines of an earlier attempt up to the step it is resumed from (later ones are redone)."""
    return [r for r in read_jsonl(path) if r["step"] <= up_to_step and not r.get("final")]


def continuation(run: StageRun) -> str | None:
    """The checkpoint a raised train.max_steps continues from: the last one of the complete output
    of the same lineage (everything but max_steps equal), when it stopped short of the new total.
    The new output starts with the old one's metrics, so the curves and segments span both."""
    previous, max_steps = run.extends, run.config.train.max_steps
    if previous is None:
        return None
    if previous["steps"] >= max_steps or not previous.get("checkpoint"):
        why = (
            f"has {previous['steps']} steps, not fewer than train.max_steps={max_steps}"
            if previous.get("checkpoint")
            else "records no checkpoint"
        )
        print(f"pretrain: the complete output in {run.current} {why}: training anew", flush=True)
        return None
    checkpoint = join(run.current, previous["checkpoint"])
    # The run_dir is the trust boundary (DCP's .metadata is unpickled): a path read from the run's
    # own manifest must stay inside the output it belongs to, links resolved.
    inside = isinstance(previous["checkpoint"], str) and path_inside(run.current, checkpoint)
    if not inside or inside == ".":
        raise BadInput(
            f"{join(run.current, 'manifest.json')}: checkpoint={previous['checkpoint']!r} is not a folder inside "
            f"{run.current}; refusing to read it (fix the manifest, or --force pretrain to train anew)"
        )
    print(
        f"pretrain: continuing the complete run in {run.current} from step {previous['steps']} to {max_steps} "
        f"(the learning-rate schedule is recomputed for {max_steps} steps)",
        flush=True,
    )
    if not exists(join(run.out, METRICS)):
        write_text(
            join(run.out, METRICS),
            "".join(json.dumps(r) + "\n" for r in read_metrics(join(run.current, METRICS), previous["steps"])),
        )
    return checkpoint


def check_resolved(run: StageRun, plan: PretrainPlan) -> None:
    """What `auto` resolved to on this cluster (GPU or CPU, bf16 or fp32) must be what the resumed
    run trained with: a resume equals an uninterrupted run only on the same arithmetic."""
    path, resolved = join(run.out, RESOLVED), {"use_gpu": plan.use_gpu, "precision": plan.precision}
    before = read_json(path) if run.resumed else None
    if before is not None and before != resolved:
        raise BadInput(
            f"{run.out}: the unfinished run trained with {before}, this cluster gives {resolved}: set "
            "train.use_gpu and train.precision to match, or --force to start over"
        )
    write_text(path, json.dumps(resolved) + "\n")


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
        "model": dataclasses.asdict(plan.albert),
        "eval": read_json(join(plan.out_dir, "eval.json")),
        "checkpoint": checkpoint,
        "segments": segments(read_jsonl(join(plan.out_dir, METRICS)), train.max_steps),
        "config": dataclasses.asdict(config),
    }


__all__ = [
    "METRICS",
    "PretrainPlan",
    "check_resolved",
    "check_schema",
    "continuation",
    "manifest_fields",
    "plan_pretraining",
    "resolve_gpu",
    "read_metrics",
    "segments",
]
