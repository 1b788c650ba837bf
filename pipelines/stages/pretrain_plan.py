"""The pretraining plan from the run directory, made by the driver before any worker starts: the
checks on its inputs (the data and vocabulary manifests, the parquet schema, the batch arithmetic,
the GPUs), what a raised train.max_steps continues from, and what a resumed run trained with."""

from __future__ import annotations

import json

from ..config import Config
from ..config.sections import resolved_precision
from ..errors import BadInput, MissingInput
from ..prep.masking import MaskingSpec
from ..rundir.lifecycle import StageRun
from ..rundir.registry import read_manifest, stage_dir
from ..storage import exists, join, read_json, write_text
from ..storage.contained import Contained, Escape
from ..train.plan import METRICS, RESOLVED, PretrainPlan, albert_config_of, check_schema, read_metrics


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


def plan_pretraining(config: Config, out_dir: str, gpus: tuple[int, int | None]) -> PretrainPlan:
    """Every up-front check, before any worker starts; returns what the workers need. `gpus`: the
    cluster's GPUs now and the most it can have (`resolve_gpu`)."""
    data, data_dir = read_manifest(config, "data"), stage_dir(config, "data")
    if data is None:
        raise MissingInput(
            f"no examples in {data_dir} (no manifest.json): run `albert-ray data` with the same run_dir first"
        )
    n_train, n_validation = data["examples"]["train"], data["examples"]["validation"]
    if n_train == 0:
        raise BadInput(
            f"{data_dir}: the train split is empty (0 examples); check the data stage's manifest for rejected documents"
        )
    vocab = read_manifest(config, "vocab")
    if vocab is None:
        raise MissingInput(f"no vocabulary in {stage_dir(config, 'vocab')}: run `albert-ray vocab`")
    if data.get("vocab_sha256") != vocab["sha256"]:
        raise BadInput(
            f"{data_dir} was made with another vocabulary (sha256 {data.get('vocab_sha256')}) than "
            f"{stage_dir(config, 'vocab')}/spiece.model ({vocab['sha256']}): rerun the data stage"
        )
    dynamic = data["masking"]["mode"] == "dynamic"
    written = data["config"]["data"]  # what the examples were made with: they decide the objective
    objective = written.get("sentence_objective", "sop")
    check_schema(join(data_dir, "train"), dynamic, objective != "none")
    if n_validation:
        check_schema(join(data_dir, "validation"), dynamic, objective != "none")
    albert = albert_config_of(config, vocab["vocab_size"])
    if albert.vocab_size != vocab["vocab_size"]:
        raise BadInput(
            f"train.init_from={config.train.init_from}: vocab_size {albert.vocab_size} differs from "
            f"the vocabulary's {vocab['vocab_size']} pieces"
        )
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
        max_seq_length=written["max_seq_length"],
        sentence_objective=objective,
    )


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
    # A path read from the run's own manifest must name a folder inside the output it belongs to,
    # through no link (pipelines/storage/contained.py): the checkpoint is then read as any is
    # (pipelines/train/dcp_reader.py), running no code from it, but a manifest must not make the run
    # train from a folder outside its run_dir.
    manifest = join(run.current, "manifest.json")
    try:
        checkpoint = Contained(run.current, manifest).path(previous["checkpoint"])
    except Escape as e:
        raise BadInput(
            f"{manifest}: checkpoint={previous['checkpoint']!r} is not a folder inside {run.current} ({e.why}); "
            "refusing to read it (fix the manifest, or --force pretrain to train anew)"
        ) from None
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


__all__ = ["check_resolved", "continuation", "plan_pretraining", "resolve_gpu"]
