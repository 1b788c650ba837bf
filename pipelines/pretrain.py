"""`python -m pipelines.pretrain`: ALBERT pretraining on Ray Train (FSDP2), from {run_dir}/data to
{run_dir}/pretrain/.

The driver checks every input before any worker starts, then runs a thin worker function: Ray
Data batches in, the pure PyTorch step (pipelines/train/) in the middle, metrics and sharded
checkpoints out through `ray.train.report`. It writes into the folder being built
(pipelines/lifecycle.py): a failed worker restarts from the latest checkpoint (FailureConfig), a
re-run of an unfinished run resumes from it (on any number of workers: DCP reshards), and a raised
`train.max_steps` continues the complete output from its last checkpoint instead of starting over.

Output layout (documented in the README):
- `train/checkpoint_*/`: DCP checkpoints (pipelines/train/checkpoint.py), the newest few kept
- `metrics.jsonl`: one line per log step, one per validation pass ("split": "validation") and one
  per start, resume or continuation ("event")
- `eval.json`: the final validation metrics; `hf/`: the transformers-format export
- `config.yaml`, `manifest.json` (last)
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import tempfile
import time

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import ray
import ray.train
import torch
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import save_hf_pretrained

from .cli import stage_main
from .config import Config, TrainSection, config_to_dict
from .errors import BadInput, MissingInput
from .lifecycle import StageRun, stage_runner
from .prep.masking import MaskingSpec
from .prep.process import example_schema
from .ray_runtime import init_ray
from .stages import read_manifest, stage_dir
from .storage import (arrow_filesystem, exists, filesystem, join, path_inside, read_bytes, read_json, read_jsonl, write_bytes,
                      write_text)
from .train.build import build_model, build_optimizer
from .train.checkpoint import load_checkpoint, save_checkpoint
from .train.loader import mean_width, position_of_step, rank_micro_batches
from .train.metrics import MetricsWindow, evaluate, peak_flops, progress_line
from .train.parallel import apply_ac, apply_compile, apply_fsdp
from .train.schedule import build_scheduler
from .train.step import train_step

log = logging.getLogger(__name__)

# Test-only fault injection: once per run, the last worker exits hard after this optimizer step.
FAULT_ENV = "ALBERT_TEST_FAIL_AT_STEP"
CHECKPOINTS = "train"  # Ray Train's run name: checkpoints live in {run_dir}/pretrain/train/
METRICS = "metrics.jsonl"
RESOLVED = "resolved.json"  # the arithmetic a run trains with: {use_gpu, precision}


def _albert_config(config: Config, vocab_size: int) -> AlbertConfig:
    """The model to train: train.init_from's architecture when set, else the model section's."""
    if config.train.init_from is None:
        return config.model.albert_config(vocab_size)
    path = join(config.train.init_from, "config.json")
    if not exists(path):
        raise MissingInput(f"train.init_from={config.train.init_from}: no config.json there "
                                "(expected a transformers ALBERT directory)")
    return AlbertConfig.from_hf_dict(read_json(path))


def plan_pretraining(config: Config, out_dir: str) -> dict:
    """Every up-front check, before any worker starts; returns what the workers need."""
    data = read_manifest(config, "data")
    data_dir = stage_dir(config, "data")
    if data is None:
        raise MissingInput(f"no examples in {data_dir} (no manifest.json): run `python -m pipelines.data` "
                                "with the same run_dir first")
    n_train, n_validation = data["examples"]["train"], data["examples"]["validation"]
    if n_train == 0:
        raise BadInput(f"{data_dir}: the train split is empty (0 examples); check the data stage's manifest "
                         "for rejected documents")
    vocab = read_manifest(config, "vocab")
    if vocab is None:
        raise MissingInput(f"no vocabulary in {stage_dir(config, 'vocab')}: run `python -m pipelines.vocab`")
    if data.get("vocab_sha256") != vocab["sha256"]:
        raise BadInput(f"{data_dir} was made with another vocabulary (sha256 {data.get('vocab_sha256')}) than "
                         f"{stage_dir(config, 'vocab')}/spiece.model ({vocab['sha256']}): rerun the data stage")
    dynamic = data["masking"]["mode"] == "dynamic"
    _check_schema(join(data_dir, "train"), dynamic)
    if n_validation:
        _check_schema(join(data_dir, "validation"), dynamic)
    albert = _albert_config(config, vocab["vocab_size"])
    if albert.vocab_size != vocab["vocab_size"]:
        raise BadInput(f"train.init_from={config.train.init_from}: vocab_size {albert.vocab_size} differs from "
                         f"the vocabulary's {vocab['vocab_size']} pieces")
    data_config = data["config"]["data"]
    if data_config["max_seq_length"] > albert.max_position_embeddings:
        raise BadInput(f"data.max_seq_length={data_config['max_seq_length']} of {data_dir} exceeds "
                         f"model.max_position_embeddings={albert.max_position_embeddings}")
    train = config.train
    if train.global_batch_size > n_train:
        raise BadInput(f"train.global_batch_size={train.global_batch_size} exceeds the {n_train} training "
                         f"examples in {data_dir}: not one full batch")
    if n_validation < train.micro_batch * train.num_workers:
        raise BadInput(f"{data_dir}: {n_validation} validation examples, fewer than one evaluation batch "
                         f"(train.num_workers x micro batch = {train.micro_batch * train.num_workers}); "
                         "raise data.validation_fraction")
    gpus = int(ray.cluster_resources().get("GPU", 0))
    # auto: GPUs when the cluster has any (not "when it has enough": that would make the worker
    # count, a setting, decide the precision of a run)
    use_gpu = train.use_gpu if isinstance(train.use_gpu, bool) else gpus > 0
    if use_gpu and gpus < train.num_workers:
        raise BadInput(f"train.use_gpu={str(train.use_gpu).lower()} with train.num_workers={train.num_workers}, but "
                       f"the cluster has {gpus} GPUs" + ("; set train.use_gpu=false to train on CPUs"
                                                        if train.use_gpu == "auto" else ""))
    precision = train.precision if train.precision != "auto" else ("bf16" if use_gpu else "fp32")
    masking = dataclasses.asdict(MaskingSpec(data_config["masked_lm_prob"], data_config["max_predictions_per_seq"],
                                             data_config["ngram"], vocab["vocab_size"])) if dynamic else None
    return {
        "albert": dataclasses.asdict(albert), "train": config_to_dict(train), "use_gpu": use_gpu,
        "precision": precision, "masking": masking, "max_predictions": data_config["max_predictions_per_seq"],
        "n_train": n_train, "n_validation": n_validation,
        "batches_per_epoch": n_train // train.global_batch_size,
        "out_dir": out_dir, "spiece_model": join(stage_dir(config, "vocab"), "spiece.model"),
        "fault_step": int(os.environ.get(FAULT_ENV, 0)), "initial_checkpoint": None,
    }


def _check_schema(split_dir: str, dynamic: bool) -> None:
    fs, path = filesystem(split_dir)
    files = sorted(f for f in fs.find(path) if f.endswith(".parquet"))
    if not files:
        raise MissingInput(f"{split_dir}: no parquet files")
    with fs.open(files[0], "rb") as f:
        schema = pq.read_schema(f)
    for expected in example_schema(dynamic):
        if expected.name not in schema.names:
            raise BadInput(f"{files[0]}: column {expected.name!r} missing (found {schema.names}); "
                             "the data was written by another version: rerun the data stage")
        if schema.field(expected.name).type != expected.type:
            raise BadInput(f"{files[0]}: column {expected.name!r} has type {schema.field(expected.name).type}, "
                             f"expected {expected.type}")


# ---- the worker: thin; the logic is in pipelines/train/ -------------------------------------------

def _global_batches(shard, plan: dict, start_step: int):
    """(epoch, Arrow table) of every global batch from optimizer step `start_step` on, the same on
    every worker: the shard is the whole dataset, read in order, shuffled with a per-epoch seed."""
    train = plan["train"]
    epoch, skip = position_of_step(start_step, plan["batches_per_epoch"])
    while True:
        batches = shard.iter_batches(
            batch_size=train["global_batch_size"], batch_format="pyarrow", drop_last=True, prefetch_batches=2,
            local_shuffle_buffer_size=max(train["shuffle_buffer"], train["global_batch_size"]),
            local_shuffle_seed=train["seed"] * 1_000_003 + epoch)
        for i, table in enumerate(batches):
            if i >= skip:
                yield epoch, table
        skip, epoch = 0, epoch + 1


def _validation_tables(shard, plan: dict, rank: int, world: int, micro: int) -> list:
    """This worker's share of the validation batches of every pass (whole batches of micro * world
    rows until eval_max_sequences), as Arrow tables: read once per worker and kept, so a pass does
    not re-run the Ray Data pipeline."""
    limit = plan["train"]["eval_max_sequences"] or plan["n_validation"]
    tables, seen = [], 0
    for table in shard.iter_batches(batch_size=micro * world, batch_format="pyarrow", drop_last=True):
        if seen >= limit:
            break
        seen += len(table)
        tables.append(table.slice(rank * micro, micro))
    return tables


def _write_metrics(path: str, records: list[dict]) -> None:
    write_text(path, "".join(json.dumps(r) + "\n" for r in records))


def _read_metrics(path: str, up_to_step: int) -> list[dict]:
    """Lines of an earlier attempt up to the step it is resumed from (later ones are redone)."""
    return [r for r in read_jsonl(path) if r["step"] <= up_to_step and not r.get("final")]


def train_worker(plan: dict) -> None:
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    train = TrainSection(**plan["train"])
    # Ray sets OMP_NUM_THREADS to the worker's whole reserved CPUs (1 for a 1-CPU worker, even on
    # a machine where nothing else computes while it trains): torch_threads says otherwise.
    torch.set_num_threads(train.torch_threads or max(1, int(train.cpus_per_worker)))
    device = ray.train.torch.get_device() if plan["use_gpu"] else torch.device("cpu")
    albert = AlbertConfig(**plan["albert"])
    masking = MaskingSpec(**plan["masking"]) if plan["masking"] else None

    model = build_model(albert, train.init_from, train.seed).to(device)
    if train.activation_checkpointing:
        apply_ac(model)
    if train.compile:
        apply_compile(model)
    apply_fsdp(model, init_device_mesh(device.type, (world,)),
               torch.bfloat16 if plan["precision"] == "bf16" else None)
    optimizer = build_optimizer(model, train.optimizer, train.lr, train.weight_decay)
    scheduler = build_scheduler(optimizer, train.warmup_steps, train.max_steps)

    step, event = 0, "started"
    checkpoint = ray.train.get_checkpoint()  # this run's own latest (a restart or a resume)
    if checkpoint is None and plan["initial_checkpoint"]:  # the complete output this run continues
        fs, path = arrow_filesystem(plan["initial_checkpoint"])
        checkpoint, event = Checkpoint(path, filesystem=fs), "continued"
    elif checkpoint is not None:
        event = "resumed"
    if checkpoint:
        with checkpoint.as_directory() as directory:
            step = load_checkpoint(directory, model, optimizer, scheduler)["step"]
        if step > train.max_steps:  # the lifecycle resumes only runs that have not passed max_steps
            raise RuntimeError(f"{checkpoint.path} is at step {step}, past train.max_steps={train.max_steps}")
        if rank == 0:
            print(f"pretrain: {event} from {checkpoint.path} at step {step} of {train.max_steps}", flush=True)

    metrics_path = join(plan["out_dir"], METRICS)
    records = _read_metrics(metrics_path, step) if rank == 0 else []
    records.append({"step": step, "event": event, "max_steps": train.max_steps, "num_workers": world,
                    **({"checkpoint": checkpoint.path} if checkpoint else {})})
    window = MetricsWindow(albert, world, peak_flops(device, plan["precision"], train.peak_tflops))
    validation = ray.train.get_dataset_shard("validation")
    started = time.perf_counter()

    validation_tables: list | None = None

    def validate(report: dict, final: bool = False) -> dict:
        """One validation pass, added to the metrics records and to `report`."""
        nonlocal validation_tables
        if validation_tables is None:
            validation_tables = _validation_tables(validation, plan, rank, world, train.micro_batch)
        result = evaluate(model, (mb for table in validation_tables
                                  for mb in rank_micro_batches(table, 0, 1, train.micro_batch,
                                                               plan["max_predictions"], masking, train.seed, 0)),
                          device)
        records.append({"step": step, "split": "validation", **result, **({"final": True} if final else {})})
        if rank == 0:
            print(f"step {step} validation: mlm_acc {result['mlm_accuracy']:.3f} sop_acc "
                  f"{result['sop_accuracy']:.3f} mlm_loss {result['mlm_loss']:.3f} sop_loss "
                  f"{result['sop_loss']:.3f}", flush=True)
        report.update({f"validation_{k}": v for k, v in result.items()})
        return result

    batches = _global_batches(ray.train.get_dataset_shard("train"), plan, step) if step < train.max_steps else ()
    for epoch, table in batches:
        micro_batches = rank_micro_batches(table, rank, world, train.micro_batch, plan["max_predictions"],
                                           masking, train.seed, epoch)
        width = mean_width(micro_batches)
        micro_batches = [{k: v.to(device, non_blocking=True) for k, v in mb.items()} for mb in micro_batches]
        window.add(train_step(model, optimizer, scheduler, micro_batches, train.max_grad_norm), width)
        step += 1
        last = step == train.max_steps
        if plan["fault_step"] == step and rank == world - 1:
            _inject_fault(plan["out_dir"])
        report: dict = {}
        if step % train.log_every == 0 or last:
            report = window.summary(step, device)
            window.reset()
            records.append(report)
            if rank == 0:
                print(progress_line(report, train.max_steps, time.perf_counter() - started), flush=True)
        if step % train.eval_every == 0 and not last:  # the final pass follows the loop
            validate(report)
        if report and rank == 0:
            _write_metrics(metrics_path, records)
        if step % train.checkpoint_every == 0 or last:
            with tempfile.TemporaryDirectory() as directory:
                save_checkpoint(directory, model, optimizer, scheduler, step)
                ray.train.report({"step": step, **report}, checkpoint=Checkpoint.from_directory(directory))
        elif report:
            ray.train.report({"step": step, **report})
        if last:
            break

    final_report: dict = {"step": step}
    final = validate(final_report, final=True)
    if rank == 0:
        _write_metrics(metrics_path, records)
    ray.train.report(final_report)
    full_state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        _export(plan, albert, full_state, {"step": step, **final})


def _inject_fault(out_dir: str) -> None:
    """Test-only: exit hard, once per run (a marker file remembers), as a crashed worker would.
    It waits for Ray Train's controller to have polled the earlier reports (every 2 s by default):
    a checkpoint reported but not yet registered when a worker dies is not resumed from."""
    marker = join(out_dir, "fault_injected")
    if not exists(marker):
        write_text(marker, "")
        time.sleep(5)
        os._exit(1)


def _export(plan: dict, albert: AlbertConfig, state: dict, final: dict) -> None:
    """Rank 0: eval.json and hf/ (written locally, then copied to the run's storage)."""
    write_text(join(plan["out_dir"], "eval.json"), json.dumps(final, indent=2) + "\n")
    model = AlbertForPreTraining(albert)
    model.load_state_dict(state)
    with tempfile.TemporaryDirectory() as tmp:
        spiece = os.path.join(tmp, "spiece.model")
        with open(spiece, "wb") as f:
            f.write(read_bytes(plan["spiece_model"]))
        export = save_hf_pretrained(model, os.path.join(tmp, "hf"), spiece_model=spiece)
        hf_dir = join(plan["out_dir"], "hf")
        for name in sorted(os.listdir(export)):
            with open(export / name, "rb") as f:
                write_bytes(join(hf_dir, name), f.read())


# ---- the driver -----------------------------------------------------------------------------------

def _read_split(config: Config, split: str) -> ray.data.Dataset:
    fs, path = arrow_filesystem(join(stage_dir(config, "data"), split))
    return ray.data.read_parquet(path, filesystem=fs, file_extensions=["parquet"])


def _continuation(run: StageRun) -> str | None:
    """The checkpoint a raised train.max_steps continues from: the last one of the complete output
    of the same lineage (everything but max_steps equal), when it stopped short of the new total."""
    previous, max_steps = run.extends, run.config.train.max_steps
    if previous is None:
        return None
    if previous["steps"] >= max_steps or not previous.get("checkpoint"):
        why = (f"has {previous['steps']} steps, not fewer than train.max_steps={max_steps}"
               if previous.get("checkpoint") else "records no checkpoint")
        print(f"pretrain: the complete output in {run.current} {why}: training anew", flush=True)
        return None
    checkpoint = join(run.current, previous["checkpoint"])
    print(f"pretrain: continuing the complete run in {run.current} from step {previous['steps']} to {max_steps} "
          f"(the learning-rate schedule is recomputed for {max_steps} steps)", flush=True)
    if not exists(join(run.out, METRICS)):  # its history, so the curves and segments span both
        write_text(join(run.out, METRICS), "".join(json.dumps(r) + "\n" for r in
                                                    _read_metrics(join(run.current, METRICS), previous["steps"])))
    return checkpoint


def _check_resolved(run: StageRun, plan: dict) -> None:
    """What `auto` resolved to on this cluster (GPU or CPU, bf16 or fp32) must be what the resumed
    run trained with: a resume equals an uninterrupted run only on the same arithmetic."""
    path, resolved = join(run.out, RESOLVED), {"use_gpu": plan["use_gpu"], "precision": plan["precision"]}
    before = read_json(path) if run.resumed else None
    if before is not None and before != resolved:
        raise BadInput(f"{run.out}: the unfinished run trained with {before}, this cluster gives {resolved}: set "
                       "train.use_gpu and train.precision to match, or --force to start over")
    write_text(path, json.dumps(resolved) + "\n")


def segments(records: list[dict], final_step: int) -> list[dict]:
    """The runs the model went through, from the metrics' start/resume/continue events: each with
    its first step, last step, total (max_steps) and workers."""
    events = [r for r in records if r.get("event")]
    return [{"event": e["event"], "start_step": e["step"],
             "end_step": events[i + 1]["step"] if i + 1 < len(events) else final_step,
             "max_steps": e.get("max_steps"), "num_workers": e.get("num_workers")} for i, e in enumerate(events)]


def build_pretrain(run: StageRun) -> dict:
    """Pretrain on {run_dir}/data into the stage's folder; returns the manifest's fields."""
    config, out_dir = run.config, run.out
    init_ray()
    plan = plan_pretraining(config, out_dir)
    plan["initial_checkpoint"] = _continuation(run)
    _check_resolved(run, plan)
    if run.resumed:
        print(f"pretrain: resuming the unfinished run in {out_dir}", flush=True)
    train = config.train
    storage_fs, storage_path = arrow_filesystem(out_dir)
    if isinstance(storage_fs, pafs.LocalFileSystem):
        os.makedirs(storage_path, exist_ok=True)
    ingest = ray.train.DataConfig.default_ingest_options()
    ingest.preserve_order = True  # the same batches in the same order on every worker and every attempt
    trainer = TorchTrainer(
        train_worker, train_loop_config=plan,
        scaling_config=ScalingConfig(num_workers=train.num_workers, use_gpu=plan["use_gpu"],
                                     resources_per_worker={"CPU": train.cpus_per_worker,
                                                           **({"GPU": 1} if plan["use_gpu"] else {})}),
        run_config=ray.train.RunConfig(
            name=CHECKPOINTS, storage_path=storage_path, storage_filesystem=storage_fs,
            failure_config=FailureConfig(max_failures=train.max_failures, controller_failure_limit=train.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=train.checkpoints_to_keep)),
        datasets={"train": _read_split(config, "train"), "validation": _read_split(config, "validation")},
        dataset_config=ray.train.DataConfig(datasets_to_split=[], execution_options=ingest))
    log.info("pretraining %s (hidden %d) on %d %s workers: %d steps of %d sequences (%d x %d per worker)",
             config.model.preset, plan["albert"]["hidden_size"], train.num_workers, "GPU" if plan["use_gpu"] else "CPU",
             train.max_steps, train.global_batch_size, train.accumulation_steps, train.micro_batch)
    try:
        result = trainer.fit()
    except ray.train.TrainingFailedError as e:
        raise RuntimeError(f"pretraining failed (after train.max_failures={train.max_failures} restarts; a re-run "
                           f"resumes from the latest checkpoint in {join(out_dir, CHECKPOINTS)}): {e}") from e
    eval_path = join(out_dir, "eval.json")
    if not exists(eval_path):
        raise RuntimeError(f"pretraining ended without writing {eval_path}")
    evaluation = read_json(eval_path)
    scheme = out_dir.partition("://")[0] + "://" if "://" in out_dir else ""  # Ray Train's paths carry none
    checkpoint = path_inside(out_dir, scheme + result.checkpoint.path) if result.checkpoint else None
    print(f"pretrain: validation mlm_accuracy {evaluation['mlm_accuracy']:.3f}, sop_accuracy "
          f"{evaluation['sop_accuracy']:.3f}; model in {join(run.current, 'hf')}", flush=True)
    return {
        "steps": train.max_steps, "sequences_seen": train.max_steps * train.global_batch_size,
        "epochs": train.max_steps / plan["batches_per_epoch"], "num_workers": train.num_workers,
        "use_gpu": plan["use_gpu"], "precision": plan["precision"], "model": plan["albert"], "eval": evaluation,
        "checkpoint": checkpoint, "segments": segments(read_jsonl(join(out_dir, METRICS)), train.max_steps),
        "config": config_to_dict(config),
    }


run_pretrain = stage_runner("pretrain")


if __name__ == "__main__":
    sys.exit(stage_main("pretrain", "Pretrain ALBERT on the examples with Ray Train."))
