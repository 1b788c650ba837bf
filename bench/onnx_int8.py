"""int8 ONNX on CPU (issue #46 item 5): one classifier as torch fp32, onnxruntime fp32 (`albert-ray
export onnx`), our int8 (`--quantize int8`, pipelines/export/quantize.py) and optimum's dynamic int8
of the same fp32 export, and ours with full-range weights (FULL_RANGE), side by side in one run:
file size, accuracy on the same eval rows, and latency at batch 1 and 32, sequence 128; the fp32 and
our int8 file also in a session with onnxruntime's default options (its SkipLayerNormalization
fusion, which the product's sessions leave out: onnx_runner.SLOWER_FUSIONS), and with `--profile N`
where each onnxruntime side's batch-1 time goes, per op type (onnxruntime's own profiler). And QA
predict through the onnx backend (fp32 and int8) against bench/qa_predict_speed.py's plain
transformers loop (issue #44's goal: >= 2x).

The model: `--run-dir`, a run whose finetune stage fine-tuned the embedded BBC News task (its
finetune/best; the eval rows are the stage's own held-out split, rebuilt from its config.yaml); or,
without it, a random classifier of `--preset` on the first `--rows` BBC articles (a smoke run: the
accuracy then means nothing, the agreement does).

optimum's side: optimum 2.3.0's `AutoQuantizationConfig.avx512_vnni(is_static=False,
per_channel=False)`, applied by onnxruntime's ONNXQuantizer with the arguments
`ORTQuantizer.quantize` passes it (copied from optimum-onnx 0.1.0's quantization.py): ORTQuantizer
itself cannot be imported beside transformers 5 (optimum-onnx 0.1.0 imports
`transformers.utils.is_offline_mode`, which transformers 5 removed; it requires transformers<4.58).

Accuracy and agreement: each file run by the product's Predictor (predict.backend=onnx: the same
encode, collate and decode as torch's), at the length the model records. Latency: the model alone
(torch's module; an onnxruntime session on `--threads` threads, the product's `cpu_session` unless
the side says onnxruntime's defaults), random token ids, no padding, the median of `--rounds` calls
of each (`--batch32-rounds` at batch 32), the sides interleaved (a change in the machine's load falls
on all), after a warm-up. Progress goes to stderr (a base-sized model takes minutes). QA:
bench/qa_predict_speed.py's random QA export of `--qa-preset`, its questions, its transformers loop;
ours is the Predictor with the QA export's ONNX files.

    python bench/onnx_int8.py --run-dir /tmp/run            # make run's model (finetune/best)
    python bench/onnx_int8.py --preset tiny --rows 40 --rounds 3 --qa-rows 8   # a smoke run
    python bench/onnx_int8.py --preset base --rows 40 --rounds 20 --batch32-rounds 2 --qa-rows 0 --profile 10
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/'s modules, as a script sees them

SIDES = ("torch fp32", "ORT fp32", "ORT int8 (ours)", "ORT int8, full-range weights", "ORT int8 (optimum)")
FULL_RANGE = "ORT int8, full-range weights"
"""Our int8 with the MatMul weights in [-127, 127] instead of int8_cpu.PRODUCT_MAX's 63: on an x86 CPU
without VNNI onnxruntime's uint8 x int8 kernel saturates on it (the same size and speed as ours)."""
FUSED = ", attention fused"
"""The suffix of a copy of a file whose attention is onnxruntime's MultiHeadAttention op (`export onnx
--fuse-attention`: pipelines/export/fuse.py)."""
FUSED_SIDES = ("ORT fp32", "ORT int8 (ours)")
DEFAULT_SESSION = ", onnxruntime's defaults"
"""The suffix of a side timed in a session of onnxruntime's default options (its fusions all on)."""
DEFAULT_SESSION_SIDES = ("ORT fp32", "ORT int8 (ours)")
SEQ = 128
_START = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _START:6.1f} s] {message}", file=sys.stderr, flush=True)


def eval_rows(run_dir: Path) -> tuple[list[dict], list[str]]:
    """The finetune stage's held-out BBC rows ({"text"}) and their gold labels, rebuilt from its config."""
    from pipelines.config import load_config
    from pipelines.finetuning.families import FAMILIES
    from pipelines.finetuning.families._sequence.task import load_task

    config = load_config(str(run_dir / "finetune" / "config.yaml"))
    task = load_task(config.finetune, FAMILIES[config.finetune.task].load_training())
    return [{"text": t} for t in task.eval.texts], list(task.eval.labels)


def spiece_dir(args, root: Path) -> str:
    """--spiece, or qa_predict_speed's SentencePiece model trained here once."""
    from qa_predict_speed import default_spiece_dir

    if args.spiece:
        return args.spiece
    return str(root / "spiece") if (root / "spiece").is_dir() else default_spiece_dir(root)


def random_classifier(root: Path, spiece: str, preset: str, rows: int) -> tuple[Path, list[dict], list[str]]:
    """A random classifier of `preset` over the BBC labels (qa_predict_speed's SentencePiece model),
    and the first `rows` BBC articles."""
    from albert_model import AlbertConfig, AlbertForSequenceClassification
    from pipelines.finetuning.tables import bbc_news_examples
    from pipelines.storage.models import ModelUsage, save_model

    examples = bbc_news_examples()
    labels = sorted(set(examples.labels))
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(preset, vocab_size=1000).replace(num_labels=len(labels))
    model = AlbertForSequenceClassification(config).eval()
    picked = np.random.default_rng(0).choice(len(examples), rows, replace=False)
    usage = ModelUsage("classification", SEQ)
    save_model(model, spiece, str(root / "model"), labels, None, usage)
    return root / "model", [{"text": examples.texts[i]} for i in picked], [examples.labels[i] for i in picked]


def full_range_int8(fp32: Path, output: Path) -> None:
    """Our int8 of `fp32` with full-range (8-bit) MatMul weights (FULL_RANGE)."""
    from pipelines.export.onnx import quantize_export
    from pipelines.export.quantize import INT8_MAX

    quantize_export(fp32, output, product_max=INT8_MAX)


def optimum_int8(fp32: Path, output: Path) -> None:
    """optimum's dynamic int8 of `fp32` (the module docstring)."""
    import onnx
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig

    config = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    quantizer = ONNXQuantizer(
        model=onnx.load(str(fp32)),
        static=config.is_static,
        per_channel=config.per_channel,
        mode=config.mode,
        weight_qType=config.weights_dtype,
        activation_qType=config.activations_dtype,
        tensors_range=None,
        reduce_range=config.reduce_range,
        nodes_to_quantize=config.nodes_to_quantize,
        nodes_to_exclude=config.nodes_to_exclude,
        op_types_to_quantize=[getattr(op, "value", op) for op in config.operators_to_quantize],
        extra_options={
            "WeightSymmetric": config.weights_symmetric,
            "ActivationSymmetric": config.activations_symmetric,
            "EnableSubgraph": False,
            "ForceSymmetric": config.activations_symmetric and config.weights_symmetric,
            "AddQDQPairToWeight": config.qdq_add_pair_to_weight,
            "DedicatedQDQPair": config.qdq_dedicated_pair,
            "QDQOpTypePerChannelSupportToAxis": config.qdq_op_type_per_channel_support_to_axis,
        },
    )
    quantizer.quantize_model()
    quantizer.model.save_model_to_file(str(output))


def session(path: Path, threads: int, defaults: bool = False, profile: str | None = None):
    """A session of `path` with the product's options (onnx_runner.session_options), or with
    `defaults` onnxruntime's default options, on `threads` threads either way; `profile`:
    onnxruntime's profiler on, its file named from this prefix."""
    import onnxruntime

    from pipelines.inference.onnx_runner import session_options

    options = onnxruntime.SessionOptions() if defaults else session_options(threads)
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    if profile is not None:
        options.enable_profiling, options.profile_file_prefix = True, profile
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def latencies(calls: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each call, the calls interleaved, after one warm-up call each."""
    for call in calls.values():
        call()
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for done in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            seconds[name].append(time.perf_counter() - start)
        if (done + 1) % max(1, rounds // 4) == 0:
            progress(f"  round {done + 1} of {rounds}")
    return {name: float(np.median(s)) for name, s in seconds.items()}


def op_profile(path: Path, defaults: bool, inputs: dict, calls: int, threads: int, root: Path) -> dict[str, float]:
    """Microseconds per call spent in each op type's kernels (onnxruntime's profiler), over `calls`
    calls after a warm-up of as many (the first calls allocate and are slower)."""
    s = session(path, threads, defaults, profile=str(root / "profile"))
    for _ in range(2 * calls):
        s.run(None, inputs)
    trace = Path(s.end_profiling())
    events = [e for e in json.loads(trace.read_text()) if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    trace.unlink()
    per_node: dict[str, list[float]] = collections.defaultdict(list)
    op_of = {}
    for event in events:
        per_node[event["name"]].append(event["dur"])
        op_of[event["name"]] = event["args"]["op_name"]
    per_op: dict[str, float] = collections.Counter()
    for node, durations in per_node.items():
        per_op[op_of[node]] += sum(durations[-calls:]) / calls
    return dict(sorted(per_op.items(), key=lambda kv: -kv[1]))


def classifier_figures(model: Path, files: dict[str, Path | None], rows, gold, args, root: Path) -> dict:
    """Each side's size, accuracy and agreement with torch on `rows`, and its latency; the sides of
    onnxruntime's default options (DEFAULT_SESSION_SIDES) latency only, their files being the same."""
    from pipelines.export.onnx import check_inputs
    from pipelines.inference.predictor import Predictor

    predictions = {}
    for side, path in files.items():
        progress(f"predicting {len(rows)} rows: {side}")
        predictions[side] = [p["prediction"] for p in Predictor.load(str(model), onnx=path and str(path)).predict(rows)]
    net = Predictor.load(str(model), device="cpu").model
    figures: dict = {side: {} for side in files} | {side + DEFAULT_SESSION: {} for side in DEFAULT_SESSION_SIDES}
    for side, path in files.items():
        figures[side]["bytes"] = (
            path.stat().st_size if path else sum(f.stat().st_size for f in model.glob("*.safetensors"))
        )
        figures[side]["accuracy"] = float(np.mean([p == g for p, g in zip(predictions[side], gold)]))
        figures[side]["agreement_with_torch"] = float(
            np.mean([p == q for p, q in zip(predictions[side], predictions["torch fp32"])])
        )
    sessions = {side: session(path, args.threads) for side, path in files.items() if path} | {
        side + DEFAULT_SESSION: session(files[side], args.threads, defaults=True) for side in DEFAULT_SESSION_SIDES
    }
    config = net.config
    batch32_rounds = max(1, args.rounds // 4) if args.batch32_rounds is None else args.batch32_rounds
    for batch, rounds in ((1, args.rounds), (32, batch32_rounds)):
        if not rounds:
            continue
        inputs = check_inputs(config, batch, SEQ, seed=1)
        inputs["attention_mask"][:] = 1
        tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}

        def run_torch(t=tensors):
            with torch.inference_mode():
                return net(**t)

        calls = {"torch fp32": run_torch} | {
            side: (lambda s=s, i=inputs: s.run(None, i)) for side, s in sessions.items()
        }
        progress(f"timing batch {batch} x {SEQ}: {rounds} rounds of {len(calls)} sides")
        for side, s in latencies(calls, rounds).items():
            figures[side][f"ms_batch{batch}"] = s * 1e3
    if args.profile:
        inputs = check_inputs(config, 1, SEQ, seed=1)
        inputs["attention_mask"][:] = 1
        for side in sessions:
            progress(f"profiling batch 1: {side}")
            defaults = side.endswith(DEFAULT_SESSION)
            path = files[side.removesuffix(DEFAULT_SESSION)]
            figures[side]["us_per_op_batch1"] = op_profile(path, defaults, inputs, args.profile, args.threads, root)
    return figures


def qa_figures(args, root: Path) -> dict:
    """QA predict through the onnx backend (fp32, int8) against the plain transformers loop."""
    from qa_predict_speed import load_transformers, make_model, questions, timed

    from pipelines.export.onnx import export_onnx, load_exportable, quantize_export
    from pipelines.inference.predictor import Predictor

    model = make_model(root / "qa", args.qa_preset, Path(spiece_dir(args, root)), 256, 64, 128)
    fp32, int8 = root / "qa.onnx", root / "qa.int8.onnx"
    export_onnx(load_exportable(model), fp32)
    quantize_export(fp32, int8)
    rows = questions(model, args.qa_rows)

    def ours(path: Path):
        predictor = Predictor.load(model, batch_size=16, onnx=str(path))

        def answer(chosen):
            return {r["id"]: p["answer"] for r, p in zip(chosen, predictor.predict(chosen))}, []

        return answer

    contenders = {
        "onnx fp32": ours(fp32),
        "onnx int8": ours(int8),
        "transformers": load_transformers(model, 16, "max_length"),
    }
    times = timed(contenders, rows, args.qa_rounds, 16)
    theirs_s, theirs = times["transformers"][0], times["transformers"][1]
    return {
        "preset": args.qa_preset,
        "questions": len(rows),
        **{
            name: {
                "questions_per_s": len(rows) / times[name][0],
                "speedup_vs_transformers": theirs_s / times[name][0],
                "same_answers": float(np.mean([times[name][1][k] == theirs[k] for k in theirs])),
            }
            for name in contenders
        },
    }


def table(figures: dict) -> str:
    fp32 = figures["ORT fp32"]
    lines = [
        "| | size | vs ORT fp32 | accuracy | agreement with torch | batch 1 ms | speedup vs ORT fp32 | batch 32 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for side, f in figures.items():
        size = (
            f"{f['bytes'] / 1e6:.2f} MB | {f['bytes'] / fp32['bytes']:.3f}x | {f['accuracy']:.4f} | "
            f"{f['agreement_with_torch']:.4f}"
            if "bytes" in f
            else "(the file above) | | |"
        )
        batch32 = f"{f['ms_batch32']:.1f}" if "ms_batch32" in f else ""
        lines.append(
            f"| {side} | {size} | {f['ms_batch1']:.2f} | {fp32['ms_batch1'] / f['ms_batch1']:.2f}x | {batch32} |"
        )
    return "\n".join(lines)


def profile_table(figures: dict, top: int = 12) -> str:
    """Microseconds per batch-1 call by op type, the sides as columns; the op types that cost most."""
    sides = [side for side, f in figures.items() if "us_per_op_batch1" in f]
    totals: dict[str, float] = collections.Counter()
    for side in sides:
        totals.update(figures[side]["us_per_op_batch1"])
    ops = [op for op, _ in totals.most_common(top)]
    lines = ["| op type | " + " | ".join(sides) + " |", "|---|" + "---:|" * len(sides)]
    for op in ops:
        lines.append(
            f"| {op} | " + " | ".join(f"{figures[s]['us_per_op_batch1'].get(op, 0):.0f}" for s in sides) + " |"
        )
    rest = [sum(v for op, v in figures[s]["us_per_op_batch1"].items() if op not in ops) for s in sides]
    lines.append("| the other op types | " + " | ".join(f"{v:.0f}" for v in rest) + " |")
    lines.append(
        "| all kernels | " + " | ".join(f"{sum(figures[s]['us_per_op_batch1'].values()):.0f}" for s in sides) + " |"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", help="a run whose finetune stage fine-tuned BBC News (finetune/best)")
    parser.add_argument("--preset", default="tiny", help="without --run-dir: a random classifier of this size")
    parser.add_argument("--rows", type=int, default=200, help="without --run-dir: BBC articles")
    parser.add_argument("--spiece", help="without --run-dir: a folder with spiece.model (default: one trained here)")
    parser.add_argument("--threads", type=int, default=1, help="torch's and each onnxruntime session's")
    parser.add_argument("--rounds", type=int, default=100, help="timed calls at batch 1")
    parser.add_argument(
        "--batch32-rounds", type=int, help="timed calls at batch 32 (default: a quarter of --rounds; 0: none)"
    )
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="profile N batch-1 calls of each onnxruntime side"
    )
    parser.add_argument("--qa-preset", default="tiny")
    parser.add_argument("--qa-rows", type=int, default=100, help="QA questions (0: no QA timing)")
    parser.add_argument("--qa-rounds", type=int, default=3)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    from pipelines.export.onnx import export_onnx, fuse_export, load_exportable, quantize_export

    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        if args.run_dir:
            model = Path(args.run_dir) / "finetune" / "best"
            rows, gold = eval_rows(Path(args.run_dir))
        else:
            model, rows, gold = random_classifier(root, spiece_dir(args, root), args.preset, args.rows)
        files = {side: root / f"{i}.onnx" for i, side in enumerate(SIDES) if i}
        progress(
            f"exporting {model}: fp32, our int8 (7-bit and full-range weights), optimum's int8, the attention fused"
        )
        export_onnx(load_exportable(model), files["ORT fp32"])
        quantize_export(files["ORT fp32"], files["ORT int8 (ours)"])
        full_range_int8(files["ORT fp32"], files[FULL_RANGE])
        optimum_int8(files["ORT fp32"], files["ORT int8 (optimum)"])
        fusions = {}
        for side in FUSED_SIDES:
            files[side + FUSED] = files[side].with_suffix(".fused.onnx")
            fusions[side] = fuse_export(files[side], files[side + FUSED])
        figures = classifier_figures(model, {"torch fp32": None, **files}, rows, gold, args, root)
        result = {
            "model": str(model) if args.run_dir else f"random {args.preset}",
            "eval_rows": len(rows),
            "threads": args.threads,
            "rounds": args.rounds,
            "load_average": os.getloadavg(),
            "attention_fusions": fusions,
            "classifier": figures,
            "qa": qa_figures(args, root) if args.qa_rows else None,
        }
    print(table(figures))
    if args.profile:
        print(profile_table(figures))
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
