"""Fine-tuning step speed: our step against transformers' Trainer step on the same device, weights
and batch (bf16 on CUDA; goal >= 2x).

Ours is `finetune_step` (pipelines/finetuning/loop.py), the body of train_epoch for every batch:
the host batch to the device (pinned, not blocking), the forward under bf16 autocast (the last layer
run only at [CLS] for the heads that read nothing else), the family's loss in fp32, backward,
torch's clip_grad_norm_ to 1.0, AdamW from pipelines/train/build.py (fused on CUDA; lr 2e-5, weight
decay 0.01, none on LayerNorm and biases, eps 1e-6), the linear schedule. On CUDA it is timed eager,
with finetune.compile (the layer groups compiled by apply_compile) and with finetune.cuda_graphs
(GraphedModel: the whole model compiled with mode="reduce-overhead", its forward and backward
replayed as CUDA graphs).

Tasks (--finetune-tasks, the names of pipelines/finetuning/families/'s FAMILIES), each side its
model of the task from the same initial weights:
- classification: AlbertForSequenceClassification, 5 labels, cross-entropy (the last layer runs
  only at [CLS] in ours);
- regression: AlbertForSequenceClassification with one output, MSE against a float (transformers
  infers problem_type "regression" from num_labels=1);
- multi_label: AlbertForSequenceClassification, 5 labels each 0 or 1, BCE with logits (ours: the
  sequence family's, summed over examples of each one's mean over labels; transformers:
  problem_type="multi_label_classification" and float labels);
- token_classification: AlbertForTokenClassification, a tag of 5 at each word's first piece and
  -100 (ignored) at [CLS], [SEP], the words' other pieces and the padding, the same `labels` [B, S]
  on both sides; cross-entropy over the tagged positions (the last layer runs everywhere in both;
  ours' step divides the summed loss by the sequences, transformers' by the tagged positions);
- multiple_choice: AlbertForMultipleChoice, 4 choices per question, inputs [B, 4, S] as the choice
  family's collate builds them (each choice padded to the batch's widest), `labels` the right
  choice's index; a softmax over a question's choices (the last layer runs only at [CLS] in ours).
  A row of the table is B questions (4B sequences): its seq/s are questions per second;
- question_answering: AlbertForQuestionAnswering, a start and an end position per sequence inside
  its second segment (transformers: start_positions, end_positions; the last layer runs
  everywhere in both).
The loss each side reports is transformers' mean, so the two agree on the same weights and batch
(tests/bench/test_finetune_speed.py). A task of finetune_contenders.GRAPHS_UNSUPPORTED (none today)
gets no finetune.cuda_graphs timing: its result holds ours_graphs_error, the reason.

Transformers' is its model of the same task (attn_implementation="sdpa", our initial weights) under
`transformers.Trainer` with TrainingArguments(bf16=True, optim="adamw_torch_fused", the same lr,
weight decay, eps, max_grad_norm and linear schedule), prepared as Trainer prepares it
(create_optimizer, accelerator.prepare, create_scheduler), and stepped as its inner training loop
steps: the batch to the device (its DataLoader's default, a blocking copy), get_batch_samples (the
item count), training_step (forward under accelerate's autocast, loss, backward), the accelerator's
clip_grad_norm_, optimizer.step(), lr_scheduler.step(), model.zero_grad(). Left out of its step: the
loss's NaN check (logging_nan_inf_filter, a host read every step), logging and callbacks; its real
step is at least this long, so a speedup here is not overstated.

Both start every step from the same host batch, the output of the task's family's collate (pinned on
CUDA, as Trainer's DataLoader pins; finetune_contenders.make_batch): random ids and targets, every
sequence full length, or (padded) lengths drawn from [seq/2, seq] and padded to the longest.
Dropout as fine-tuning runs it (ALBERT v2: none in the encoder, 0.1 before the task's classifier;
question answering has none there).

Speed: `--warmup` untimed steps each (compilation, optimizer state, allocator), then `--rounds`
rounds of `--steps` steps alternating between the contenders, the order reversed every other round,
the device synchronised around each; a figure is the median round's mean step time. Peak memory
(CUDA): the most allocated during one step after warm-up, over what was allocated before the
contender was built: its weights, gradients, optimizer state and the step's activations.

    python bench/finetune_speed.py                                   # CUDA: base and large at 128
    python bench/finetune_speed.py --finetune-configs base-512:32,large-512:32 --finetune-padding full
    python bench/finetune_speed.py --finetune-tasks question_answering --finetune-configs base-384:32
    python bench/finetune_speed.py --finetune-tasks token_classification,multiple_choice,multi_label
    python bench/finetune_speed.py --device cpu                      # a smoke run: tiny, fp32

bench/gpu_suite.py runs it as a phase: `finetune_speed.finetune_phase(args)`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from finetune_contenders import (  # noqa: E402  (bench/ beside this file: sys.path[0] for a script)
    NUM_LABELS,
    TASKS,
    build_contenders,
    make_batch,
)

from albert_model import AlbertConfig  # noqa: E402

PADDINGS = ("full", "padded")
CUDA_DEFAULTS = dict(configs="base-128:32,large-128:32", warmup=3, steps=5, rounds=3)
CPU_DEFAULTS = dict(configs="tiny-64:4", warmup=1, steps=1, rounds=1)


def parse_config(text: str) -> tuple[str, int, int]:
    """`preset-seq:batch` -> (preset, seq, batch)."""
    name, batch = text.split(":")
    preset, seq = name.rsplit("-", 1)
    return preset, int(seq), int(batch)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(step, steps: int, device: torch.device) -> float:
    """Seconds per step over `steps` steps, the device synchronised before and after."""
    sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - started) / steps


def measure(args, text: str, padding: str, device: torch.device, work: str, task: str = "classification") -> dict:
    preset, seq, batch_size = parse_config(text)
    cuda = device.type == "cuda"
    precision = "bf16" if cuda else "fp32"
    config = AlbertConfig.from_preset(preset, vocab_size=30000, num_labels=NUM_LABELS, classifier_dropout_prob=0.1)
    batch = make_batch(batch_size, seq, config.vocab_size, padding == "padded", pin=cuda, task=task)
    torch._dynamo.reset()  # a fresh compile cache per size
    makers = build_contenders(
        config,
        batch,
        device,
        precision,
        work,
        compiled=cuda and args.finetune_compile,
        graphs=cuda and args.finetune_graphs,
        task=task,
    )
    real_tokens = int(batch["attention_mask"].sum())
    result: dict = {
        "task": task,
        "preset": preset,
        "seq": seq,
        "batch": batch_size,
        "padding": padding,
        "width": batch["input_ids"].shape[-1],  # multiple_choice: [B, choices, S]
        "real_tokens": real_tokens,
        "precision": precision,
    }
    built = {}
    for name, make in makers.items():  # build and warm up one at a time, measuring its peak
        sync(device)
        before = torch.cuda.memory_allocated() if cuda else 0
        started = time.perf_counter()
        try:
            built[name] = make()
            for _ in range(args.warmup):
                built[name].step()
            sync(device)
        except Exception as error:
            if name in ("ours", "transformers"):
                raise
            result[f"{name}_error"] = f"{type(error).__name__}: {error}"  # a variant failing hides nothing else
            built.pop(name, None)
            continue
        result[f"{name}_warmup_s"] = time.perf_counter() - started
        if cuda:
            torch.cuda.reset_peak_memory_stats()
            built[name].step()
            sync(device)
            result[f"{name}_peak_gib"] = (torch.cuda.max_memory_allocated() - before) / 2**30
    names = list(built)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # no contender always goes first
            times[name].append(timed(built[name].step, args.steps, device))
    for name, ts in times.items():
        step_s = statistics.median(ts)
        result[name] = {
            "step_ms": step_s * 1e3,
            "step_ms_rounds": [t * 1e3 for t in ts],
            "sequences_per_s": batch_size / step_s,
            "real_tokens_per_s": real_tokens / step_s,
        }
    theirs = result["transformers"]["sequences_per_s"]
    result["speedup"] = result["ours"]["sequences_per_s"] / theirs
    for name in ("compiled", "graphs"):
        if f"ours_{name}" in result:
            result[f"speedup_{name}"] = result[f"ours_{name}"]["sequences_per_s"] / theirs
    del built
    if cuda:
        torch.cuda.empty_cache()
    return result


def summary_of(r: dict) -> dict:
    """Sequences/s of each contender and the speedups, for a progress line."""
    if "error" in r:
        return r
    seqs = {name: round(v["sequences_per_s"]) for name, v in r.items() if isinstance(v, dict)}
    errors = {k: v for k, v in r.items() if k.endswith("_error")}  # a variant skipped or failed
    return seqs | {k: round(r[k], 2) for k in ("speedup", "speedup_compiled", "speedup_graphs") if k in r} | errors


def finetune_phase(args) -> dict:
    """Every config of args.finetune_configs (null: the device's defaults) at every padding of
    args.finetune_padding for every task of args.finetune_tasks, keyed `config/padding` for
    classification and `task/config/padding` for the others. Also reads args.device ("cuda" or "cpu"),
    args.warmup, args.steps, args.rounds, args.finetune_compile and args.finetune_graphs."""
    device = torch.device(args.device)
    configs = args.finetune_configs or (CUDA_DEFAULTS if device.type == "cuda" else CPU_DEFAULTS)["configs"]
    out = {}
    with tempfile.TemporaryDirectory(prefix="finetune-speed-") as work:
        for task in args.finetune_tasks.split(","):
            for text in configs.split(","):
                for padding in args.finetune_padding.split(","):
                    key = f"{text}/{padding}" if task == "classification" else f"{task}/{text}/{padding}"
                    try:
                        out[key] = measure(args, text, padding, device, work, task)
                    except Exception as error:  # one size failing (memory, compile) must not hide the others
                        out[key] = {"error": f"{type(error).__name__}: {error}"}
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                    print(f"finetune {key}: {json.dumps(summary_of(out[key]))}", flush=True)
    return out


def table(results: dict) -> str:
    """The phase's results as a markdown table."""
    lines = [
        "| task | config | padding | ours seq/s | compiled seq/s | CUDA graphs seq/s | transformers seq/s | speedup "
        "| compiled speedup | CUDA graphs speedup | peak GiB ours / compiled / graphs / theirs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, r in results.items():
        task, config, padding = ["classification", *key.split("/")] if key.count("/") == 1 else key.split("/")
        if "error" in r:
            lines.append(f"| {task} | {config} | {padding} | {r['error'][:80]} | | | | | | | |")
            continue
        seqs, speedups = {}, {}
        for name in ("compiled", "graphs"):
            variant = r.get(f"ours_{name}")
            seqs[name] = f"{variant['sequences_per_s']:,.0f}" if variant else "-"
            speedups[name] = f"{r[f'speedup_{name}']:.2f}x" if variant else "-"
        peaks = " / ".join(
            f"{r[name + '_peak_gib']:.1f}" if name + "_peak_gib" in r else "-"
            for name in ("ours", "ours_compiled", "ours_graphs", "transformers")
        )
        lines.append(
            f"| {task} | {config} | {padding} | {r['ours']['sequences_per_s']:,.0f} | {seqs['compiled']} "
            f"| {seqs['graphs']} | {r['transformers']['sequences_per_s']:,.0f} | **{r['speedup']:.2f}x** "
            f"| {speedups['compiled']} | {speedups['graphs']} | {peaks} |"
        )
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The phase's own options (bench/gpu_suite.py has --warmup, --steps, --rounds and --device)."""
    p.add_argument(
        "--finetune-configs", default=None, help="preset-seq:batch, comma-separated (CUDA: base-128:32,large-128:32)"
    )
    p.add_argument("--finetune-padding", default=",".join(PADDINGS), help="full (every sequence seq long), padded")
    p.add_argument("--finetune-tasks", default="classification", help=f"comma-separated, of {', '.join(TASKS)}")
    p.add_argument(
        "--no-finetune-compile",
        dest="finetune_compile",
        action="store_false",
        help="on CUDA, skip timing ours with finetune.compile",
    )
    p.add_argument(
        "--no-finetune-graphs",
        dest="finetune_graphs",
        action="store_false",
        help="on CUDA, skip timing ours with finetune.cuda_graphs",
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per contender (CUDA 3, CPU 1)")
    p.add_argument("--steps", type=int, default=None, help="steps per timed round (CUDA 5, CPU 1)")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (CUDA 3, CPU 1)")
    p.add_argument("--json", type=Path, help="also write the results to this file")
    add_arguments(p)
    args = p.parse_args(argv)
    defaults = CUDA_DEFAULTS if args.device == "cuda" else CPU_DEFAULTS
    for name in ("warmup", "steps", "rounds"):
        if getattr(args, name) is None:
            setattr(args, name, defaults[name])
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import transformers

    results = finetune_phase(args)
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(table(results))
    print(f"\n{device}, torch {torch.__version__}, transformers {transformers.__version__}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
