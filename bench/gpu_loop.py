"""The GPU suite's loop phases (bench/gpu_suite.py runs them): where the real pretraining loop loses
to the step alone, and the LAMB step alone.

loop, per `preset-seq:batch@folder` (a data stage's output with train/ and validation/):
- the step alone, on the worker's model (pipelines/train/loop.py's build_training: compiled layer
  groups, FSDP2 with bf16 parameters, the LAMB the loop builds), over a synthetic full-length batch
  and over real batches of the folder collated once and kept on the device: what padding and the
  real widths cost, with no loader, metrics or health;
- the loop itself (pretrain_loop, what a Ray Train worker runs) on that folder, as configured by
  default (training health on, batches made in a loader process) and with one part changed at a
  time: the loader in a thread, health off, health checked before each update (spike_policy=skip:
  a host read per step). Its throughput is read from metrics.jsonl: the median of the windows
  after the first (which holds compilation), and their mean with the validation pass and the
  checkpoint inside (total sequences over total time).

lamb: one optimizer step over a model's parameters (FSDP2, one rank, random gradients), the fused
Triton step against the multi-tensor (foreach) step, with their bandwidth at 40 and ~108 bytes per
parameter.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import gpu_speed as speed  # bench/ beside this file, as the scripts import it
import torch
from model_step import make_batch

from albert_model import AlbertConfig
from pipelines.config import TrainSection
from pipelines.config.health import HealthSection
from pipelines.train.groups import parameter_groups
from pipelines.train.input import ordered_batches
from pipelines.train.lamb import Lamb
from pipelines.train.loader import BatchSource, TrainSplit, to_device
from pipelines.train.loop import StartPoint, build_training, pretrain_loop
from pipelines.train.parallel import apply_fsdp
from pipelines.train.plan import PretrainPlan

LOOP_VARIANTS = {
    "loop": {},
    "loop_thread_loader": {"loader_processes": 0},
    "loop_no_health": {"health": HealthSection(enabled=False)},
    "loop_checked_health": {"health": HealthSection(spike_policy="skip")},
}


class Stop(Exception):
    """Ends a run after its checkpoint, as a planned stop would."""


class FolderIO:
    """The loop's host here: a data stage's local folder, checkpoints kept in a local folder."""

    def __init__(self, plan: PretrainPlan, checkpoints: Path, stop_after: int | None = None):
        self.plan, self.checkpoints, self.stop_after = plan, checkpoints, stop_after

    @contextlib.contextmanager
    def start_point(self):
        found = sorted(self.checkpoints.glob("step_*"))
        yield StartPoint(str(found[-1]), str(found[-1]), "resumed") if found else None

    def train_split(self) -> TrainSplit:
        return TrainSplit(f"{self.plan.data_dir}/train", self.plan.train.seed)

    def validation_batches(self):
        return ordered_batches(f"{self.plan.data_dir}/validation", self.plan.train.micro_batch(1))

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if checkpoint_dir:
            shutil.copytree(checkpoint_dir, self.checkpoints / f"step_{metrics['step']:06d}")
        if metrics["step"] == self.stop_after:
            raise Stop


def data_setting(folder: Path, key: str, default: int) -> int:
    """One of the data stage's settings (its manifest's config data section), the default without one."""
    manifest = folder / "manifest.json"
    if manifest.exists():
        return int(json.loads(manifest.read_text())["config"]["data"][key])
    return default


def max_predictions(folder: Path) -> int:
    """The data stage's masked positions per sequence, 20 without a manifest."""
    return data_setting(folder, "max_predictions_per_seq", 20)


def folder_plan(folder: Path, out_dir: Path, preset: str, vocab_size: int, batch: int, **train) -> PretrainPlan:
    """A bf16, compiled pretraining plan on a data stage's folder."""
    from pipelines.train.input import SliceReader

    reader = SliceReader(str(folder / "train"), batch, 0, 1, 42)
    section = TrainSection(
        **{
            "use_gpu": speed.DEVICE.type == "cuda",
            "global_batch_size": batch,
            "precision": "bf16" if speed.DEVICE.type == "cuda" else "fp32",
            "compile": speed.DEVICE.type == "cuda",
            "eval_max_sequences": 1024,
            **train,
        }
    )
    micro = section.micro_batch(1)
    n_validation = sum(len(t) for t in ordered_batches(str(folder / "validation"), micro))
    return PretrainPlan(
        albert=AlbertConfig.from_preset(preset, vocab_size=vocab_size),
        train=section,
        use_gpu=speed.DEVICE.type == "cuda",
        precision=section.precision,
        masking=None,
        max_predictions=max_predictions(folder),
        max_seq_length=data_setting(folder, "max_seq_length", 512),
        n_train=reader.index.num_rows,
        n_validation=n_validation,
        batches_per_epoch=reader.batches_per_epoch,
        data_dir=str(folder),
        out_dir=str(out_dir),
        spiece_model=None,
    )


def parse_loop_spec(spec: str) -> tuple[str, int, int, Path]:
    name, folder = spec.split("@")
    size, batch = name.split(":")
    preset, seq = size.rsplit("-", 1)
    return preset, int(seq), int(batch), Path(folder)


def step_alone(plan: PretrainPlan, seq: int, args) -> dict:
    """The worker's step over a synthetic full batch and over real batches kept on the device,
    alternating in rounds on one model."""
    from pipelines.train.step import train_step

    model, optimizer, scheduler = build_training(plan, 1, speed.DEVICE)
    source = BatchSource(
        TrainSplit(f"{plan.data_dir}/train", plan.train.seed), plan.train.global_batch_size, 0, 1,
        plan.train.micro_batch(1), plan.max_predictions, None, plan.batches_per_epoch,
    )  # fmt: skip
    real = [
        [to_device(mb, speed.DEVICE) for mb in step]
        for step in itertools.islice(source.steps(0), args.loop_real_batches)
    ]
    synthetic = make_batch(plan.albert, plan.train.global_batch_size, seq, plan.max_predictions, speed.DEVICE.type)
    fields = {f.name: getattr(synthetic, f.name) for f in dataclasses.fields(synthetic) if f.name != "hf_labels"}
    full = [to_device(fields, speed.DEVICE)]
    cycle = itertools.cycle(real)

    def run(batches) -> None:
        train_step(model, optimizer, scheduler, batches, plan.train.max_grad_norm)

    for _ in range(args.warmup):
        run(full)
        run(next(cycle))
    times = {"synthetic": [], "real": []}
    for _ in range(args.rounds):
        times["synthetic"].append(speed.timed(lambda: run(full), args.steps))
        times["real"].append(speed.timed(lambda: run(next(cycle)), args.steps))
    widths = [mb["input_ids"].shape[1] for step in real for mb in step]
    padded = [mb["attention_mask"] is not None for step in real for mb in step]
    batch = plan.train.global_batch_size
    return {
        name: {"step_ms": statistics.median(ts) * 1e3, "sequences_per_s": batch / statistics.median(ts)}
        for name, ts in times.items()
    } | {"real_widths": sorted(set(widths)), "real_padded_share": sum(padded) / len(padded)}


def loop_run(plan: PretrainPlan, work: Path) -> dict:
    started = time.perf_counter()
    pretrain_loop(plan, 0, 1, speed.DEVICE, FolderIO(plan, work / "checkpoints"))
    seconds = time.perf_counter() - started
    records = [json.loads(line) for line in (work / "metrics.jsonl").read_text().splitlines()]
    windows = [r for r in records if "sequences_per_s" in r]
    steady = windows[1:]
    sequences = plan.train.log_every * plan.train.global_batch_size
    mean = len(steady) * sequences / sum(sequences / r["sequences_per_s"] for r in steady) if steady else None
    return {
        "seconds": seconds,
        "windows_sequences_per_s": [round(r["sequences_per_s"], 1) for r in windows],
        "median_sequences_per_s": statistics.median(r["sequences_per_s"] for r in steady) if steady else None,
        "mean_sequences_per_s": mean,
        "mfu": statistics.median(r["mfu"] for r in steady) if steady and steady[0]["mfu"] is not None else None,
        "events": [r["event"] for r in records if "event" in r],
        "final_validation": next((r for r in records if r.get("final")), None),
    }


def loop_phase(args) -> dict:
    out = {}
    for spec in args.loop.split(","):
        preset, seq, batch, folder = parse_loop_spec(spec)
        steps = args.loop_steps
        common = dict(
            max_steps=steps, warmup_steps=steps // 10, lr=1e-3, log_every=args.loop_log_every,
            eval_every=args.loop_eval_every, checkpoint_every=args.loop_eval_every,
        )  # fmt: skip
        result: dict = {}
        work = Path(tempfile.mkdtemp(prefix="gpu-loop-"))
        try:
            result["step_alone"] = step_alone(
                folder_plan(folder, work / "alone", preset, args.vocab_size, batch), seq, args
            )
            for name in args.loop_variants.split(","):
                plan = folder_plan(folder, work / name, preset, args.vocab_size, batch, **common, **LOOP_VARIANTS[name])
                result[name] = loop_run(plan, work / name)
                print(f"loop {spec} {name}: {json.dumps(result[name]['windows_sequences_per_s'])}", flush=True)
        except Exception as error:  # one size failing must not hide the others
            result["error"] = f"{type(error).__name__}: {error}"
        finally:
            shutil.rmtree(work, ignore_errors=True)
            if speed.DEVICE.type == "cuda":
                torch.cuda.empty_cache()
        alone = result.get("step_alone", {}).get("synthetic", {}).get("sequences_per_s")
        for name in LOOP_VARIANTS:
            if alone and name in result and result[name]["median_sequences_per_s"]:
                result[name]["of_step_alone"] = result[name]["median_sequences_per_s"] / alone
                result[name]["mean_of_step_alone"] = result[name]["mean_sequences_per_s"] / alone
        out[spec] = result
    return out


def lamb_phase(args) -> dict:
    """One LAMB step over each preset's parameters, fused against foreach (median ms)."""
    from torch.distributed.device_mesh import init_device_mesh

    out = {}
    for preset in args.lamb.split(","):
        torch.manual_seed(0)
        from albert_model import AlbertForPreTraining

        model = AlbertForPreTraining(AlbertConfig.from_preset(preset, vocab_size=30000)).to(speed.DEVICE)
        apply_fsdp(
            model, init_device_mesh(speed.DEVICE.type, (1,)), torch.bfloat16 if speed.DEVICE.type == "cuda" else None
        )
        params = sum(p.numel() for p in model.parameters())
        result = {"parameters": params}
        for p in model.parameters():
            p.grad = torch.randn_like(p) * 1e-3
        for name, fused in (("fused", True), ("foreach", False)):
            optimizer = Lamb(parameter_groups(model.named_parameters(), 0.01), lr=1e-4, fused=fused)
            optimizer.step()  # moments allocated, kernels compiled
            ms = statistics.median(speed.timed(optimizer.step) for _ in range(args.lamb_iters)) * 1e3
            bytes_per = 40 if fused else 108
            result[name] = {"ms": ms, "tb_per_s_at_nominal_bytes": params * bytes_per / (ms / 1e3) / 1e12}
            del optimizer
        result["speedup"] = result["foreach"]["ms"] / result["fused"]["ms"]
        out[preset] = result
        del model
        speed.sync()
        if speed.DEVICE.type == "cuda":
            torch.cuda.empty_cache()
    return out


def add_arguments(p) -> None:
    p.add_argument(
        "--loop",
        default="base-128:256@.gpudata/s128,large-512:32@.gpudata/s512",
        help="preset-seq:batch@data-folder, ... (the loop phase)",
    )
    p.add_argument("--loop-variants", default=",".join(LOOP_VARIANTS), help=f"of {list(LOOP_VARIANTS)}")
    p.add_argument("--loop-steps", type=int, default=150)
    p.add_argument("--loop-log-every", type=int, default=25)
    p.add_argument("--loop-eval-every", type=int, default=100, help="validation and checkpoint cadence")
    p.add_argument("--loop-real-batches", type=int, default=8)
    p.add_argument("--lamb", default="large,xxlarge", help="presets whose LAMB step is timed")
    p.add_argument("--lamb-iters", type=int, default=10)
