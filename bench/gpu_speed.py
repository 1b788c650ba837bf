"""The GPU suite's timed parts (bench/gpu_suite.py runs them): our pretraining step against
transformers' AlbertForPreTraining per model size, and a profile of where a step's time goes.
Kept apart from the suite's driver, as the device helpers every phase uses. The batch and the
transformers side are bench/model_step.py's and bench/pretrain_throughput.py's."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import statistics
import time

import torch
from model_step import Batch, build_models, make_batch  # bench/ beside this file, as the scripts import it
from pretrain_throughput import make_step
from torch.distributed.device_mesh import init_device_mesh

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.flops import training_flops_per_token
from pipelines.train import step as step_module
from pipelines.train.distributed import local_tensor
from pipelines.train.groups import parameter_groups
from pipelines.train.lamb import Lamb
from pipelines.train.loader import to_device
from pipelines.train.parallel import apply_compile, apply_fsdp
from pipelines.train.schedule import build_scheduler
from pipelines.train.step import train_step

H100_BF16_TFLOPS = 989.0

DEVICE = torch.device("cuda", 0)  # --device cpu: a smoke run of the script itself, no figures


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats: int = 1) -> float:
    """Seconds per call of fn() over `repeats` calls, the device synchronised before and after."""
    sync()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync()
    return (time.perf_counter() - started) / repeats


def median_ms(fn, warmup: int = 3, iters: int = 10) -> float:
    """Median of `iters` timings of fn(), after `warmup` calls."""
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn) for _ in range(iters)) * 1e3


# ---------------------------------------------------------------- speed: ours vs transformers


def own_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    tensors = [local_tensor(p) for p in model.parameters()]
    tensors += [local_tensor(v) for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


class Ours:
    """The Ray Train worker's step: compiled layer groups, FSDP2 (bf16 parameters), LAMB, train_step.

    Variants (to measure what each part is worth): compile=False, or "encoder" (one graph for
    every depth step) with a torch.compile mode after a colon; fused=False (the multi-tensor
    LAMB instead of the fused Triton step); foreach=False (the per-tensor LAMB); sync=True (read
    the metrics after every step, as the loop did before); torch_clip=True
    (torch.nn.utils.clip_grad_norm_ on the DTensors); fsdp=False (no FSDP2: a plain module under
    bf16 autocast, what a one-GPU run could use)."""

    def __init__(
        self,
        config: AlbertConfig,
        batch: Batch,
        compile: bool | str = True,
        foreach: bool = True,
        fused: bool | None = None,
        sync: bool = False,
        torch_clip: bool = False,
        fsdp: bool = True,
        compiled_loss: bool = False,
    ):
        torch.manual_seed(0)
        self.model = AlbertForPreTraining(config).to(DEVICE)
        self.sums = None
        if compiled_loss:  # the MLM head and the loss in Inductor's kernels: upcast, softmax, gather fused
            self.model.predictions.compile()
            self.sums = torch.compile(step_module.pretraining_sums)
        if compile:
            scope, _, mode = ("layers" if compile is True else compile).partition(":")
            apply_compile(self.model, scope, mode or None)
        if fsdp:
            apply_fsdp(self.model, init_device_mesh(DEVICE.type, (1,)), torch.bfloat16)
        self.optimizer = Lamb(
            parameter_groups(self.model.named_parameters(), 0.01), lr=1e-4, foreach=foreach, fused=fused and foreach
        )
        self.scheduler = build_scheduler(self.optimizer, 0, 10**9)
        collated = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch) if f.name != "hf_labels"}
        self.micro_batches = [to_device(collated, DEVICE)]
        self.sync, self.torch_clip, self.fsdp = sync, torch_clip, fsdp
        self.graphs = isinstance(compile, str) and compile.endswith(":reduce-overhead")

    def step(self) -> None:
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()  # the last step's outputs are not read again
        clip, sums = step_module.clip_gradients, step_module.pretraining_sums
        if self.torch_clip:
            step_module.clip_gradients = torch_clip_gradients
        if self.sums is not None:
            step_module.pretraining_sums = self.sums
        try:
            with contextlib.nullcontext() if self.fsdp else torch.autocast(DEVICE.type, dtype=torch.bfloat16):
                pending = train_step(self.model, self.optimizer, self.scheduler, self.micro_batches, 1.0)
        finally:
            step_module.clip_gradients, step_module.pretraining_sums = clip, sums
        if self.sync:
            pending.get()


def torch_clip_gradients(parameters, max_norm: float) -> torch.Tensor:
    norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


VARIANTS = {
    "ours_eager": dict(compile=False),
    "ours_foreach_lamb": dict(fused=False),
    "ours_compile_encoder": dict(compile="encoder"),
    "ours_compile_encoder_graphs": dict(compile="encoder:reduce-overhead"),
    "ours_per_tensor_lamb": dict(foreach=False),
    "ours_sync_each_step": dict(sync=True),
    "ours_torch_clip": dict(torch_clip=True),
    "ours_no_fsdp": dict(fsdp=False),
    # Inductor's autotuned matrix-product templates, which can take the elementwise work that
    # follows a product (bias, GELU, residual) into its epilogue; no CUDA graphs.
    "ours_autotune": dict(compile="layers:max-autotune-no-cudagraphs"),
    # One GPU without FSDP2 (its hooks and per-step all-gather buffers defeat CUDA graphs): the
    # encoder's forward and backward each replayed as one graph.
    "ours_no_fsdp_encoder_graphs": dict(fsdp=False, compile="encoder:reduce-overhead"),
    # The MLM head and the loss compiled (Inductor fuses the fp32 upcast, log-softmax and gather).
    "ours_compiled_loss": dict(compiled_loss=True),
}


class Transformers:
    """transformers' AlbertForPreTraining (sdpa, our initial weights) stepped as
    bench/pretrain_throughput.py steps it: bf16 autocast, its loss from labels, the same LAMB and
    clipping, its SOP-head dropout (which the original has not) removed."""

    def __init__(self, config: AlbertConfig, batch: Batch):
        self.model = build_models(config, DEVICE.type)[1]
        self.model.sop_classifier.dropout = torch.nn.Identity()
        self.optimizer = Lamb(parameter_groups(self.model.named_parameters(), 0.01), lr=1e-4)
        self.step = make_step("transformers", self.model, self.optimizer, batch, torch.bfloat16, DEVICE.type)


def parse_config(text: str) -> tuple[str, int, int]:
    name, batch = text.split(":")
    preset, seq = name.rsplit("-", 1)
    return preset, int(seq), int(batch)


def speed_config(args, text: str, matmul_tflops: float | None) -> dict:
    preset, seq, batch_size = parse_config(text)
    config = AlbertConfig.from_preset(preset, vocab_size=30000)
    predictions = min(20, round(0.15 * seq))
    batch = make_batch(config, batch_size, seq, predictions, DEVICE.type)
    torch._dynamo.reset()  # a fresh compile cache per size: graphs of earlier models are not reused
    contenders = {"ours": lambda: Ours(config, batch), "transformers": lambda: Transformers(config, batch)}
    if text in args.variants.split(","):
        for name in args.variant_names.split(","):
            contenders[name] = lambda options=VARIANTS[name]: Ours(config, batch, **options)
    built, result = {}, {"preset": preset, "seq": seq, "batch": batch_size, "predictions": predictions}
    cuda = DEVICE.type == "cuda"
    for name, make in contenders.items():  # build and warm up (compile) one at a time, measuring its peak
        sync()
        before = torch.cuda.memory_allocated() if cuda else 0
        started = time.perf_counter()
        try:
            built[name] = make()
            for _ in range(args.warmup):
                built[name].step()
            sync()
        except Exception as error:  # a variant failing (compile, memory) must not hide the others
            if name in ("ours", "transformers"):
                raise
            built.pop(name, None)
            result[name] = {"error": f"{type(error).__name__}: {error}"[:500]}
            empty_cache()
            continue
        result[f"{name}_warmup_s"] = time.perf_counter() - started
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated() if cuda else 0
        built[name].step()
        sync()
        own = own_bytes(built[name].model, built[name].optimizer)
        peak = torch.cuda.max_memory_allocated() if cuda else resident
        result[f"{name}_peak_gib"] = (peak - resident + own) / 2**30
        result[f"{name}_resident_gib"] = (resident - before) / 2**30
    times: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, contender in built.items():
            times[name].append(timed(contender.step, args.steps))
    flops = training_flops_per_token(config, seq, mlm_fraction=predictions / seq)
    for name, ts in times.items():
        step_s = statistics.median(ts)
        tokens_per_s = batch_size * seq / step_s
        result[name] = {
            "step_ms": step_s * 1e3,
            "step_ms_rounds": [t * 1e3 for t in ts],
            "sequences_per_s": batch_size / step_s,
            "tokens_per_s": tokens_per_s,
            "tflops": tokens_per_s * flops / 1e12,
            "mfu_989": tokens_per_s * flops / (H100_BF16_TFLOPS * 1e12),
            "mfu_measured": tokens_per_s * flops / (matmul_tflops * 1e12) if matmul_tflops else None,
        }
    result["speedup"] = result["ours"]["sequences_per_s"] / result["transformers"]["sequences_per_s"]
    result["flops_per_token"] = flops
    del built
    empty_cache()
    return result


def speed_phase(args, matmul_tflops: float | None) -> dict:
    out = {}
    for text in args.configs.split(","):
        try:
            out[text] = speed_config(args, text, matmul_tflops)
        except Exception as error:  # one size failing (memory, compile) must not hide the others
            out[text] = {"error": f"{type(error).__name__}: {error}"}
            empty_cache()
        print(f"speed {text}: {json.dumps(summary_of(out[text]))}", flush=True)
    return out


def empty_cache() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.empty_cache()


def summary_of(r: dict) -> dict:
    """Sequences/s of each contender, ours' MFU and the speedup."""
    if "error" in r:
        return r
    seqs = {name: round(v["sequences_per_s"]) for name, v in r.items() if isinstance(v, dict) and "error" not in v}
    return seqs | {"speedup": round(r["speedup"], 2), "mfu": round(r["ours"]["mfu_989"], 3)}


# ---------------------------------------------------------------- profile: where a step's time goes


def profile_phase(args) -> dict:
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for text in args.profile.split(","):
        preset, seq, batch_size = parse_config(text)
        config = AlbertConfig.from_preset(preset, vocab_size=30000)
        ours = Ours(config, make_batch(config, batch_size, seq, min(20, round(0.15 * seq)), DEVICE.type))
        for _ in range(args.warmup):
            ours.step()
        wall = timed(ours.step, 3)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                ours.step()
            sync()
        events = prof.key_averages()
        name = text.replace(":", "_")
        (args.out / f"profile_{name}.txt").write_text(
            events.table(sort_by="self_device_time_total", row_limit=35)
            + "\n\n"
            + events.table(sort_by="self_cpu_time_total", row_limit=25)
        )
        kinds = {
            "gemm": ("gemm", "nvjet", "cutlass", "sm90_xmma", "cublas"),
            "attention": ("flash", "fmha", "attention", "cudnn", "sdpa"),
            "optimizer": ("foreach", "multi_tensor"),
        }
        shares = dict.fromkeys((*kinds, "other"), 0.0)
        for e in events:  # kernels only: not the CPU operators or the annotated ranges above them
            if e.device_type != torch.autograd.DeviceType.CUDA or e.key.startswith(("FSDP::", "Optimizer.")):
                continue
            key = e.key.lower()
            kind = next((k for k, marks in kinds.items() if any(m in key for m in marks)), "other")
            shares[kind] += e.self_device_time_total / 1e3 / 3  # ms per step
        total = sum(shares.values())
        out[text] = {"step_ms": wall * 1e3, "kernel_ms_per_step": total, "busy": total / (wall * 1e3), "ms": shares}
        del ours
        empty_cache()
    return out
