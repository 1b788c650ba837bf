"""Forward+backward speed and peak memory: our AlbertForPreTraining vs transformers' (sdpa).

Both models get the same config, weights, batch, masked positions and dtype. Speed is measured
alternating between the two in one process (rounds of `--steps` steps each), so drift in the
machine's load hits both alike. Peak memory is measured in a fresh child process per model:
on CUDA with torch.cuda.max_memory_allocated, on CPU as the growth of the peak RSS (VmHWM, reset
through /proc/self/clear_refs) over the RSS before the first step: activations, gradients and
workspace; the weights are the same for both.

    python bench/model_step.py --preset base --seq 128 --batch 8            # CPU, fp32
    python bench/model_step.py --preset base --seq 512 --batch 4 --memory-only
    python bench/model_step.py --device cuda --dtype bf16 --compile          # GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.flops import training_flops_per_token
from albert_model.hf import to_hf_state_dict
from albert_model.losses import pretraining_loss


@dataclass
class Batch:
    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    masked_positions: torch.Tensor
    masked_lm_ids: torch.Tensor
    masked_lm_weights: torch.Tensor
    sentence_order_label: torch.Tensor
    hf_labels: torch.Tensor  # (B, S) with -100 off the masked positions, transformers' format


def make_batch(config: AlbertConfig, batch: int, seq: int, predictions: int, device: str, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, config.vocab_size, (batch, seq), generator=g)
    input_ids[:, 0] = 2
    token_type_ids = torch.zeros_like(input_ids)
    token_type_ids[:, seq // 2 :] = 1
    attention_mask = torch.ones_like(input_ids)
    positions = torch.stack([torch.randperm(seq - 1, generator=g)[:predictions] + 1 for _ in range(batch)])
    positions, _ = positions.sort(dim=1)
    masked_lm_ids = torch.gather(input_ids, 1, positions)
    input_ids = input_ids.scatter(1, positions, 4)  # [MASK]
    hf_labels = torch.full_like(input_ids, -100).scatter(1, positions, masked_lm_ids)
    return Batch(
        *(
            t.to(device)
            for t in (
                input_ids,
                token_type_ids,
                attention_mask,
                positions,
                masked_lm_ids,
                torch.ones(batch, predictions),
                torch.randint(0, 2, (batch,), generator=g),
                hf_labels,
            )
        )
    )


def build_models(config: AlbertConfig, device: str):
    from transformers import AlbertConfig as HFConfig
    from transformers import AlbertForPreTraining as HFAlbertForPreTraining

    torch.manual_seed(0)
    ours = AlbertForPreTraining(config).to(device).train()
    theirs = HFAlbertForPreTraining(HFConfig(**config.to_hf_dict(), attn_implementation="sdpa"))
    theirs.load_state_dict(to_hf_state_dict(ours))
    return ours, theirs.to(device).train()


def step_fn(name: str, model, b: Batch, dtype: torch.dtype, device: str):
    autocast = torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32)

    def ours_step():
        with autocast:
            out = model(b.input_ids, b.token_type_ids, b.attention_mask, b.masked_positions)
            loss = pretraining_loss(
                out.mlm_logits, out.sop_logits, b.masked_lm_ids, b.masked_lm_weights, b.sentence_order_label
            ).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    def theirs_step():
        with autocast:
            out = model(
                input_ids=b.input_ids,
                token_type_ids=b.token_type_ids,
                attention_mask=b.attention_mask,
                labels=b.hf_labels,
                sentence_order_label=b.sentence_order_label,
            )
        out.loss.backward()
        model.zero_grad(set_to_none=True)

    return ours_step if name == "ours" else theirs_step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure_memory(args) -> dict:
    """Run in a child process: peak memory of a few steps of one model."""
    config = preset_config(args)
    b = make_batch(config, args.batch, args.seq, args.predictions, args.device)
    model = build_models(config, args.device)[0 if args.memory_child == "ours" else 1]
    if args.compile and args.memory_child == "ours":
        model = torch.compile(model)
    step = step_fn(args.memory_child, model, b, DTYPES[args.dtype], args.device)
    if args.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        for _ in range(2):
            step()
        torch.cuda.synchronize()
        return {"peak_bytes": torch.cuda.max_memory_allocated() - base}
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets the peak RSS (VmHWM) to the current RSS
    base = status_bytes("VmRSS")
    for _ in range(2):
        step()
    return {"peak_bytes": status_bytes("VmHWM") - base}


def status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def preset_config(args) -> AlbertConfig:
    return AlbertConfig.from_preset(args.preset, vocab_size=args.vocab_size)


def measure_speed(args) -> dict:
    config = preset_config(args)
    b = make_batch(config, args.batch, args.seq, args.predictions, args.device)
    ours, theirs = build_models(config, args.device)
    if args.compile:
        ours = torch.compile(ours)
    dtype = DTYPES[args.dtype]
    steps = {
        "ours": step_fn("ours", ours, b, dtype, args.device),
        "transformers": step_fn("transformers", theirs, b, dtype, args.device),
    }
    for step in steps.values():  # warm-up (and compilation)
        for _ in range(args.warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            sync(args.device)
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            sync(args.device)
            times[name].append((time.perf_counter() - start) / args.steps)
    tokens = args.batch * args.seq
    flops = training_flops_per_token(config, args.seq, mlm_fraction=args.predictions / args.seq)
    result = {}
    for name, ts in times.items():
        median = statistics.median(ts)
        result[name] = {
            "step_s_median": median,
            "step_s_all": ts,
            "tokens_per_s": tokens / median,
            "achieved_tflops": tokens / median * flops / 1e12,
        }
    result["speedup"] = result["ours"]["tokens_per_s"] / result["transformers"]["tokens_per_s"]
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="base")
    p.add_argument("--vocab-size", type=int, default=30000)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--predictions",
        type=int,
        default=None,
        help="masked positions per sequence (default: min(20, round(0.15 * seq)) as in the recipe)",
    )
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="fp32 on CPU, bf16 on GPU by default")
    p.add_argument("--compile", action="store_true", help="torch.compile our model")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=2, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds per model")
    p.add_argument("--memory-only", action="store_true", help="skip the speed measurement")
    p.add_argument("--no-memory", action="store_true", help="skip the memory measurement")
    p.add_argument("--memory-child", choices=["ours", "transformers"], help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the result to this file")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    args.dtype = args.dtype or ("bf16" if args.device == "cuda" else "fp32")
    if args.predictions is None:
        args.predictions = min(20, max(1, round(0.15 * args.seq)))

    if args.memory_child:
        print(json.dumps(measure_memory(args)))
        return

    torch.set_num_threads(torch.get_num_threads())
    result = {
        "preset": args.preset,
        "seq": args.seq,
        "batch": args.batch,
        "predictions": args.predictions,
        "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
        "dtype": args.dtype,
        "compile": args.compile,
        "threads": torch.get_num_threads(),
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
    }
    if not args.memory_only:
        result["speed"] = measure_speed(args)
    if not args.no_memory:
        # a fresh process per model; on CPU both at once (a process's peak RSS is its own), on a GPU
        # one after the other (two models at once might not fit)
        children = {}
        for name in ("ours", "transformers"):
            cmd = [sys.executable, __file__, *argv, "--memory-child", name]
            children[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if args.device == "cuda":
                children[name].wait()
        memory = {}
        for name, child in children.items():
            out, err = child.communicate()
            if child.returncode:
                raise RuntimeError(f"the {name} memory child failed ({child.returncode}): {err[-2000:]}")
            memory[name] = json.loads(out.strip().splitlines()[-1])["peak_bytes"]
        memory["ratio"] = memory["ours"] / memory["transformers"]
        result["peak_memory_bytes"] = memory
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
