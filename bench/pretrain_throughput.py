"""Full pretraining step throughput (issue #4): our AlbertForPreTraining vs transformers' (sdpa).

One step = forward, MLM + SOP loss, backward, global-norm clip to 1.0 and a LAMB step
(`pipelines.train.lamb`, lr 1e-4, weight decay 0.01, LayerNorm/bias excluded), the same for both
models on the same device, dtype, weights (copied through `albert_model.hf.to_hf_state_dict`) and
batch. We compute MLM logits only at the masked positions; transformers computes them at every
position and gets `labels` of -100 elsewhere, which is how its users train; its SOP-head dropout,
which the original does not have, is removed so that both compute the same loss. Both are
credited with the same model FLOPs per token (`albert_model.flops`, every layer application, MLM
head on the masked share only), so MFU compares useful work.

Speed alternates between the two models in one process (`--rounds` rounds of `--steps` steps, the
order flipped every round) and reports the median round. Peak memory comes from a fresh child
process per model and config: on CUDA torch.cuda.max_memory_allocated, on CPU the peak RSS
(VmHWM); either as growth over the weights and batch, after one step so that it includes the
optimizer state and excludes compilation.

    python bench/pretrain_throughput.py                                   # CPU-sized defaults
    python bench/pretrain_throughput.py --device cuda --dtype bf16 --compile \\
        --configs base-128,base-512,large-512 --batch-size 256,64,32      # one H100
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from model_step import DTYPES, Batch, build_models, make_batch, status_bytes, sync

from albert_model import AlbertConfig
from albert_model.flops import mfu, training_flops_per_token
from albert_model.losses import pretraining_loss
from pipelines.train.groups import parameter_groups
from pipelines.train.lamb import Lamb

IMPLS = ("ours", "transformers")
LR, WEIGHT_DECAY, MAX_GRAD_NORM = 1e-4, 0.01, 1.0


@dataclass(frozen=True)
class BenchConfig:
    preset: str
    seq: int
    max_predictions: int  # the original recipe's max_predictions_per_seq for this length
    cpu_batch: int
    cuda_batch: int

    @property
    def predictions(self) -> int:
        """Masked positions per sequence: the original's min(max_predictions, round(0.15 * seq))."""
        return min(self.max_predictions, max(1, round(0.15 * self.seq)))


CONFIGS = {
    "tiny-64": BenchConfig("tiny", 64, 10, cpu_batch=4, cuda_batch=64),
    "base-128": BenchConfig("base", 128, 20, cpu_batch=8, cuda_batch=256),
    "base-512": BenchConfig("base", 512, 76, cpu_batch=2, cuda_batch=64),
    "large-128": BenchConfig("large", 128, 20, cpu_batch=4, cuda_batch=128),
    "large-512": BenchConfig("large", 512, 76, cpu_batch=1, cuda_batch=32),
}
# Dense bf16 tensor-core peaks (TFLOP/s), matched as substrings of the CUDA device name in order.
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("A100", 312.0))


def peak_tflops(args) -> float | None:
    """--peak-tflops, else the table's bf16 peak for the CUDA device, else None (MFU n/a)."""
    if args.peak_tflops:
        return args.peak_tflops
    if args.device == "cuda" and args.dtype == "bf16":
        name = torch.cuda.get_device_name()
        return next((peak for key, peak in PEAK_BF16_TFLOPS if key in name), None)
    return None


def make_step(impl: str, model, optimizer: torch.optim.Optimizer, b: Batch, dtype: torch.dtype, device: str):
    """A closure running one full training step of `impl` on `b`; returns the (detached) loss."""
    autocast = torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32)

    def loss_of_batch() -> torch.Tensor:
        if impl == "ours":
            out = model(b.input_ids, b.token_type_ids, b.attention_mask, b.masked_positions)
            return pretraining_loss(
                out.mlm_logits, out.sop_logits, b.masked_lm_ids, b.masked_lm_weights, b.sentence_order_label
            ).loss
        return model(
            input_ids=b.input_ids,
            token_type_ids=b.token_type_ids,
            attention_mask=b.attention_mask,
            labels=b.hf_labels,
            sentence_order_label=b.sentence_order_label,
        ).loss

    def step() -> torch.Tensor:
        with autocast:
            loss = loss_of_batch()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def build_steps(
    name: str, batch_size: int, device: str, dtype: str, compile_: str | None = None, impls: tuple[str, ...] = IMPLS
) -> dict:
    """Both models with the same weights, each with its own LAMB, stepping on the same batch."""
    spec = CONFIGS[name]
    config = AlbertConfig.from_preset(spec.preset)
    b = make_batch(config, batch_size, spec.seq, spec.predictions, device)
    ours, theirs = build_models(config, device)
    # transformers' SOP head drops out 10% of the pooled output in training; the original (and we)
    # do not. Removing it makes both compute the same loss; it costs ~nothing ([B, H]) either way.
    theirs.sop_classifier.dropout = torch.nn.Identity()
    steps = {}
    for impl, model in zip(IMPLS, (ours, theirs)):
        if impl not in impls:
            continue
        optimizer = Lamb(parameter_groups(model.named_parameters(), WEIGHT_DECAY), lr=LR)
        if compile_ == "both" or (compile_ == "ours" and impl == "ours"):
            model = torch.compile(model)
        steps[impl] = make_step(impl, model, optimizer, b, DTYPES[dtype], device)
    return steps


def measure_speed(name: str, batch_size: int, args) -> dict[str, list[float]]:
    """Seconds per step of each model, one entry per round, rounds alternating between models."""
    steps = build_steps(name, batch_size, args.device, args.dtype, args.compile)
    for step in steps.values():  # warm-up: optimizer state, compilation, allocator caches
        for _ in range(args.warmup):
            step()
    times: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(args.rounds):
        for impl in IMPLS if r % 2 == 0 else IMPLS[::-1]:  # neither model always goes first
            sync(args.device)
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[impl]()
            sync(args.device)
            times[impl].append((time.perf_counter() - start) / args.steps)
    return times


def measure_memory(args) -> int:
    """Runs in a child process: peak memory growth of one model's steps over its weights and batch."""
    (name,) = args.configs
    step = build_steps(name, args.batch_size[0], args.device, args.dtype, args.compile, impls=(args.memory_child,))[
        args.memory_child
    ]
    cuda = args.device == "cuda"
    sync(args.device)
    base = torch.cuda.memory_allocated() if cuda else status_bytes("VmRSS")
    step()  # allocates the optimizer state (kept in the figure) and compiles (left out of it)
    sync(args.device)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    else:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the peak RSS (VmHWM) to the current RSS
    for _ in range(2):
        step()
    sync(args.device)
    return (torch.cuda.max_memory_allocated() if cuda else status_bytes("VmHWM")) - base


def memory_command(name: str, batch_size: int, impl: str, args) -> list[str]:
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--configs",
        name,
        "--batch-size",
        str(batch_size),
        "--memory-child",
        impl,
    ]
    return cmd + (["--compile", args.compile] if args.compile else [])


def memory_in_children(name: str, batch_size: int, args) -> dict[str, int]:
    """Each model's peak memory, each in a child process of its own, both at once (each reads only
    its own peak; after the speed rounds, so they do not share the machine with those)."""
    children = {
        impl: subprocess.Popen(
            memory_command(name, batch_size, impl, args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for impl in IMPLS
    }
    peaks = {}
    for impl, child in children.items():
        out, err = child.communicate()
        if child.returncode != 0:
            raise subprocess.CalledProcessError(child.returncode, child.args, out, err)
        peaks[impl] = json.loads(out.strip().splitlines()[-1])["peak_bytes"]
    return peaks


def config_rows(name: str, batch_size: int, args, peak: float | None) -> list[dict]:
    spec = CONFIGS[name]
    config = AlbertConfig.from_preset(spec.preset)
    flops = training_flops_per_token(config, spec.seq, mlm_fraction=spec.predictions / spec.seq)
    times = measure_speed(name, batch_size, args)
    peaks = {} if args.no_memory else memory_in_children(name, batch_size, args)
    rows = []
    for impl in IMPLS:
        step_s = statistics.median(times[impl])
        tokens_per_s = batch_size * spec.seq / step_s
        rows.append(
            {
                "config": name,
                "impl": impl,
                "preset": spec.preset,
                "seq": spec.seq,
                "batch": batch_size,
                "predictions": spec.predictions,
                "flops_per_token": flops,
                "step_s_median": step_s,
                "step_s_all": times[impl],
                "tokens_per_s": tokens_per_s,
                "sequences_per_s": batch_size / step_s,
                "achieved_tflops": tokens_per_s * flops / 1e12,
                "mfu": mfu(tokens_per_s, flops, peak * 1e12) if peak else None,
                "peak_memory_bytes": peaks.get(impl),
            }
        )
    return rows


def markdown_table(rows: list[dict]) -> str:
    def mem(b):
        return "" if b is None else f"{b / 1e9:.2f} GB"

    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    lines = [
        "| config | batch | masked | ours tokens/s | transformers tokens/s | speed ratio | ours seq/s "
        "| transformers seq/s | ours MFU | transformers MFU | ours peak | transformers peak | memory ratio |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for ours, theirs in zip(rows[::2], rows[1::2]):
        ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
        mem_ratio = (
            f"{ours['peak_memory_bytes'] / theirs['peak_memory_bytes']:.2f}x"
            if ours["peak_memory_bytes"] and theirs["peak_memory_bytes"]
            else ""
        )
        lines.append(
            f"| {ours['config']} | {ours['batch']} | {ours['predictions']} | {ours['tokens_per_s']:,.0f} "
            f"| {theirs['tokens_per_s']:,.0f} | **{ratio:.2f}x** | {ours['sequences_per_s']:,.2f} "
            f"| {theirs['sequences_per_s']:,.2f} | {pct(ours['mfu'])} | {pct(theirs['mfu'])} "
            f"| {mem(ours['peak_memory_bytes'])} | {mem(theirs['peak_memory_bytes'])} | {mem_ratio} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16"],
        default=None,
        help="fp32 on CPU, bf16 (autocast, fp32 weights and optimizer) on CUDA by default",
    )
    p.add_argument(
        "--compile",
        nargs="?",
        const="both",
        choices=["both", "ours"],
        default=None,
        help="torch.compile both models (or only ours) before timing",
    )
    p.add_argument(
        "--configs", default="base-128,base-512,large-512", help=f"comma-separated, from {', '.join(CONFIGS)}"
    )
    p.add_argument(
        "--batch-size",
        default=None,
        help="sequences per step: one number for all configs or one per config (default per config, CPU-sized on CPU)",
    )
    p.add_argument("--steps", type=int, default=None, help="steps per timed round (default: 1 CPU, 10 CUDA)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per model (default: 1 CPU, 3 CUDA)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default: 3 CPU, 5 CUDA)")
    p.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="device peak for MFU; default: bf16 dense peak looked up for H100/H200/A100, else n/a",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory child processes")
    p.add_argument("--json", help="also write the result to this file")
    p.add_argument("--memory-child", choices=IMPLS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    cpu = args.device == "cpu"
    args.dtype = args.dtype or ("fp32" if cpu else "bf16")
    args.configs = args.configs.split(",")
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configs {unknown}; choose from {list(CONFIGS)}")
    if args.batch_size is None:
        args.batch_size = [CONFIGS[c].cpu_batch if cpu else CONFIGS[c].cuda_batch for c in args.configs]
    else:
        sizes = [int(s) for s in args.batch_size.split(",")]
        if len(sizes) not in (1, len(args.configs)):
            p.error(f"--batch-size: give 1 or {len(args.configs)} values")
        args.batch_size = sizes * len(args.configs) if len(sizes) == 1 else sizes
    args.steps = args.steps or (1 if cpu else 10)
    args.warmup = args.warmup if args.warmup is not None else (1 if cpu else 3)
    args.rounds = args.rounds or (3 if cpu else 5)
    return args


def resolved_command(args) -> str:
    cmd = [
        "python",
        "bench/pretrain_throughput.py",
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--configs",
        ",".join(args.configs),
        "--batch-size",
        ",".join(map(str, args.batch_size)),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--rounds",
        str(args.rounds),
    ]
    if args.compile:
        cmd += ["--compile", args.compile]
    if args.peak_tflops:
        cmd += ["--peak-tflops", str(args.peak_tflops)]
    if args.no_memory:
        cmd.append("--no-memory")
    return shlex.join(cmd)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.memory_child:
        result = {"peak_bytes": measure_memory(args)}
        print(json.dumps(result))
        return result
    import transformers

    peak = peak_tflops(args)
    rows = [row for name, batch in zip(args.configs, args.batch_size) for row in config_rows(name, batch, args, peak)]
    result = {
        "command": resolved_command(args),
        "rows": rows,
        "peak_tflops": peak,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine(),
        "dtype": args.dtype,
        "compile": args.compile,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    print(markdown_table(rows))
    print(
        f"\n{result['device']}, {args.dtype}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"{torch.get_num_threads()} threads, MFU peak {peak or 'n/a'} TFLOP/s\ncommand: {result['command']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
