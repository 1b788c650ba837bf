"""Question-answering prediction: the QA family's inference (what predict and serve run on a block
of questions) against a plain transformers loop over the same windows, same export, same questions,
same threads, in one run (issue #44's acceptance 4: >= 2x; transformers 5 has no QA pipeline).

The model is a QA export of the given preset (random weights: speed does not depend on them;
`--model` takes a real one) recording its windows and answer search as the finetune stage does
(config.json's albert_ray: --seq, --query, --stride, n_best_size 20, max_answer_length 30, a
no-answer threshold of 0.0, so that both the answered and the "" branch run). The questions are the
embedded BBC cloze task's (demo.py, seed 0): contexts of up to 1,200 characters, those whose
question is at most --query pieces (transformers does not cut a question; the rest would get other
windows).

- Ours: the family's `encode` (the recorded doc-stride windows), the windows sorted by length and
  batched (--batch-size) so each batch pads to its own longest (pipelines/finetuning/loop.predict,
  the finetune stage's evaluation loop), our AlbertForQuestionAnswering, the family's
  `predictions` (the evaluation's answer search, vectorised per window).
- Transformers': AutoTokenizer and AutoModelForQuestionAnswering from the folder with no extra
  arguments; each question tokenised with `truncation="only_second", stride=...,
  return_overflowing_tokens=True, return_offsets_mapping=True` (the stride, transformers' overlap,
  set per question so the windows are ours, as run_qa lays them out), the windows batched in order
  padded to --seq (run_qa's pad_to_max_length), and the answer search as transformers' utils_qa
  writes it (loops over the n-best starts and ends of each window, the [CLS] null score, the
  threshold; the n-best of a window's own tokens, as ours). `--padding longest` pads each batch to
  its longest instead.
- With --without-kernels, a third side: ours with albert_model/kernels.py's CPU inference kernels
  patched off (F.linear and the attention mask, the code before them), to time them side by side.
Each side's time is the median of --rounds rounds over all the questions, the two alternating (a
change in the machine's load falls on both), after a warm-up; loading is not timed.
Agreement: the share of questions with the same answer text (the only expected differences: the
two tokenizers' character spans of a lone "▁" piece). `same_windows`: whether both sides built the
same windows (token ids).

    python bench/qa_predict_speed.py                        # base, 200 questions, the demo's 256 / 128
    python bench/qa_predict_speed.py --preset tiny --rows 400 --padding longest
    python bench/qa_predict_speed.py --rows 40 --rounds 2 --roofline   # and against this CPU's peak

With --roofline, each side's rate of the windows' model FLOPs (unpadded: encoder_flops) and this
CPU's float32 product rate (gemm_peak: the FFN's product shape at --threads): their ratio to the
loop's rate is the most any fp32 implementation of the same windows could gain over it here.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
NULL_THRESHOLD = 0.0


def make_model(folder: Path, preset: str, spiece_dir: Path, seq: int, query: int, stride: int) -> str:
    """A random-weight QA export of `preset` recording the answer search, as the stage writes one."""
    from albert_model import AlbertConfig
    from albert_model.model import AlbertForQuestionAnswering
    from pipelines.storage.models import ModelUsage, save_model

    torch.manual_seed(0)
    model = AlbertForQuestionAnswering(AlbertConfig.from_preset(preset, vocab_size=1000)).eval()
    settings = {
        "max_query_length": query,
        "doc_stride": stride,
        "n_best_size": N_BEST_SIZE,
        "max_answer_length": MAX_ANSWER_LENGTH,
        "null_threshold": NULL_THRESHOLD,
    }
    save_model(model, str(spiece_dir), str(folder), None, None, ModelUsage("question_answering", seq, settings))
    return str(folder)


def questions(model: str, n: int) -> list[dict[str, str]]:
    """The first `n` demo questions whose pieces fit the model's recorded max_query_length."""
    from pipelines.finetuning.families.question_answering.demo import bbc_qa_examples
    from pipelines.finetuning.tokenizer import PairTokenizer
    from pipelines.storage.models import read_model_config, read_usage

    query = read_usage(read_model_config(model, "model"), model).settings["max_query_length"]
    tokenizer = PairTokenizer(model)
    rows = []
    for e in bbc_qa_examples(seed=0):
        if len(rows) < n and len(tokenizer.pieces(e.question)) <= query:
            rows.append({"id": e.id, "question": e.question, "context": e.context})
    return rows


Contender = Callable[[list[dict]], tuple[dict[str, str], list[tuple]]]
"""Questions -> ({id: answer}, the windows' token ids), the model and tokenizer loaded before."""


def load_ours(model: str, batch: int) -> Contender:
    from albert_model.hf import load_hf_pretrained
    from pipelines.finetuning.families import FAMILIES
    from pipelines.finetuning.inference import ModelUse
    from pipelines.finetuning.loop import predict
    from pipelines.finetuning.tokenizer import PairTokenizer
    from pipelines.storage.models import applied_length, read_model_config, read_usage

    family = FAMILIES["question_answering"]
    inference, training = family.load_inference(), family.load_training()
    config = read_model_config(model, "model")
    use = ModelUse(
        PairTokenizer(model),
        applied_length(config, None, "max_seq_length", model),
        None,
        read_usage(config, model).settings,
        None,
    )
    net = load_hf_pretrained(model, family.model_class).eval()

    def answer(chosen: list[dict]) -> tuple[dict[str, str], list[tuple]]:
        encoded = inference.encode(chosen, use)
        with torch.inference_mode():
            pad = use.tokenizer.pad_id
            scores = predict(net, encoded.features, batch, pad, scores_of=training.scores, collate_fn=training.collate)
        predicted = inference.predictions(chosen, encoded, scores, use)
        return {r["id"]: p["answer"] for r, p in zip(chosen, predicted)}, [tuple(ids) for ids, _ in encoded.features]

    return answer


def without_kernels(answer: Contender) -> Contender:
    """`answer` with albert_model/kernels.py's inference kernels off: what ran before them."""
    from unittest import mock

    from albert_model import kernels

    def plain(chosen: list[dict]) -> tuple[dict[str, str], list[tuple]]:
        off = (mock.patch.object(kernels, name, lambda *a: False) for name in ("fusable", "without_padding"))
        with next(off), next(off):
            return answer(chosen)

    return plain


def utils_qa_answers(
    rows: list[dict],
    windows: list[dict],
    start: np.ndarray,
    end: np.ndarray,
    n_best: int,
    longest: int,
    threshold: float | None,
) -> dict[str, str]:
    """transformers' examples/pytorch/question-answering/utils_qa.py `postprocess_qa_predictions`,
    its loops as written there (version_2_with_negative where `threshold`, the export's recorded
    null_score_diff_threshold, is not None), but ranking a window's own tokens only, as ours does
    (utils_qa ranks the padding's logits too)."""
    answers = {}
    by_row: dict[int, list[int]] = {}
    for i, window in enumerate(windows):
        by_row.setdefault(window["row"], []).append(i)
    for r, row in enumerate(rows):
        min_null, candidates = None, []
        for i in by_row.get(r, []):
            offsets, length = windows[i]["offsets"], len(windows[i]["offsets"])
            s_logits, e_logits = start[i][:length], end[i][:length]
            null = s_logits[0] + e_logits[0]
            if min_null is None or null < min_null:
                min_null = null
            for s in np.argsort(s_logits)[-1 : -n_best - 1 : -1].tolist():
                for e in np.argsort(e_logits)[-1 : -n_best - 1 : -1].tolist():
                    if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > longest:
                        continue
                    candidates.append((s_logits[s] + e_logits[e], offsets[s][0], offsets[e][1]))
        texts = [(score, row["context"][a:b]) for score, a, b in sorted(candidates, key=lambda c: -c[0])]
        best = next(((score, text) for score, text in texts if text), (0.0, ""))
        unanswered = threshold is not None and min_null is not None and min_null - best[0] > threshold
        answers[row["id"]] = "" if unanswered else best[1]
    return answers


def load_transformers(model: str, batch: int, padding: str) -> Contender:
    import transformers

    from pipelines.storage.models import read_model_config, read_usage

    settings = read_usage(read_model_config(model, "model"), model).settings
    tokenizer = transformers.AutoTokenizer.from_pretrained(model)
    net = transformers.AutoModelForQuestionAnswering.from_pretrained(model).eval()
    seq = tokenizer.model_max_length

    def answer(chosen: list[dict]) -> tuple[dict[str, str], list[tuple]]:
        windows = []
        for r, row in enumerate(chosen):
            question = len(tokenizer(row["question"], add_special_tokens=False)["input_ids"])
            overlap = max(0, seq - question - 3 - settings["doc_stride"])  # run_squad's stride is the step
            encoded = tokenizer(
                row["question"],
                row["context"],
                truncation="only_second",
                max_length=seq,
                stride=overlap,
                return_overflowing_tokens=True,
                return_offsets_mapping=True,
            )
            for k in range(len(encoded["input_ids"])):
                types = encoded.sequence_ids(k)
                offsets = [span if t == 1 else None for span, t in zip(encoded["offset_mapping"][k], types)]
                ids, segments = encoded["input_ids"][k], encoded["token_type_ids"][k]
                windows.append({"row": r, "input_ids": ids, "token_type_ids": segments, "offsets": offsets})
        start = np.zeros((len(windows), seq), np.float32)
        end = np.zeros((len(windows), seq), np.float32)
        with torch.inference_mode():
            for i in range(0, len(windows), batch):
                part = windows[i : i + batch]
                inputs = tokenizer.pad(
                    [{k: w[k] for k in ("input_ids", "token_type_ids")} for w in part],
                    padding="max_length" if padding == "max_length" else "longest",
                    max_length=seq,
                    return_tensors="pt",
                )
                out = net(**inputs)
                width = out.start_logits.shape[1]
                start[i : i + len(part), :width] = out.start_logits.numpy()
                end[i : i + len(part), :width] = out.end_logits.numpy()
        answers = utils_qa_answers(
            chosen,
            windows,
            start,
            end,
            settings["n_best_size"],
            settings["max_answer_length"],
            settings.get("null_threshold"),
        )
        return answers, [tuple(w["input_ids"]) for w in windows]

    return answer


def encoder_flops(config: dict, lengths: list[int]) -> float:
    """The floating-point operations of the QA model's forward over windows of these lengths (each
    unpadded: the work any implementation must do for them): per application of the layer, the q, k,
    v, output and two FFN products and attention's two; the embedding projection; the QA head."""
    h, f, e = config["hidden_size"], config["intermediate_size"], config["embedding_size"]
    total = 0.0
    for n in lengths:
        layer = 2 * n * h * (3 * h + h + 2 * f) + 4 * n * n * h
        total += config["num_hidden_layers"] * layer + 2 * n * e * h + 4 * n * h
    return total


def gemm_peak(hidden: int, ffn: int, threads: int, calls: int = 7) -> float:
    """This CPU's float32 product rate in FLOP/s at `threads` threads: the fastest of `calls`
    [4096 x hidden] x [hidden x ffn] products (the FFN's shape; MKL's sgemm, what both sides call)."""
    torch.set_num_threads(threads)
    a, b = torch.randn(4096, hidden), torch.randn(hidden, ffn)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(calls):
        started = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - started)
    return 2 * 4096 * hidden * ffn / best


def timed(contenders: dict[str, Contender], rows: list[dict], rounds: int, warm: int) -> dict[str, tuple]:
    """Each contender's median seconds over `rounds` rounds on `rows` (in each round one after the
    other, the order alternating, so that a change in the machine's load falls on both), after a
    warm-up on `warm` rows, and its last answers and windows."""
    for answer in contenders.values():
        answer(rows[:warm])
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    results = {}
    for r in range(rounds):
        for name in list(contenders)[:: 1 if r % 2 == 0 else -1]:
            started = time.perf_counter()
            results[name] = contenders[name](rows)
            seconds[name].append(time.perf_counter() - started)
    return {name: (float(np.median(seconds[name])), *results[name]) for name in contenders}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--model", help="a QA export (with its albert_ray record) to use instead of a random one")
    parser.add_argument("--spiece", help="a folder with spiece.model (default: one trained on the embedded corpus)")
    parser.add_argument("--rows", type=int, default=200, help="questions")
    parser.add_argument("--seq", type=int, default=256, help="max_seq_length, per window (configs/qa-demo.yaml's)")
    parser.add_argument("--query", type=int, default=64, help="max_query_length")
    parser.add_argument("--stride", type=int, default=128, help="doc_stride: pieces between window starts")
    parser.add_argument("--batch-size", type=int, default=16, help="windows per forward pass")
    parser.add_argument("--padding", default="max_length", choices=["max_length", "longest"], help="transformers'")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each (the median is reported)")
    parser.add_argument("--without-kernels", action="store_true", help="also time ours without the inference kernels")
    parser.add_argument(
        "--roofline",
        action="store_true",
        help="also each side's rate of the windows' model FLOPs against this CPU's measured float32 product "
        "rate: the most any fp32 implementation could gain over the loop here",
    )
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        model = args.model
        if model is None:
            spiece_dir = Path(args.spiece) if args.spiece else Path(default_spiece_dir(root))
            model = make_model(root / "model", args.preset, spiece_dir, args.seq, args.query, args.stride)
        rows = questions(model, args.rows)
        contenders = {
            "ours": load_ours(model, args.batch_size),
            "transformers": load_transformers(model, args.batch_size, args.padding),
        }
        if args.without_kernels:
            contenders["ours without kernels"] = without_kernels(contenders["ours"])
        times = timed(contenders, rows, args.rounds, args.batch_size)
        config = json.loads((Path(model) / "config.json").read_text())
    (ours_s, ours, our_windows), (theirs_s, theirs, their_windows) = times["ours"], times["transformers"]
    result = {
        "preset": None if args.model else args.preset,
        "rounds": args.rounds,
        "questions": len(rows),
        "windows": len(our_windows),
        "seq": args.seq,
        "doc_stride": args.stride,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "transformers_padding": args.padding,
        "ours_questions_per_s": len(rows) / ours_s,
        "transformers_questions_per_s": len(rows) / theirs_s,
        "speedup": theirs_s / ours_s,
        "agreement": float(np.mean([ours[k] == theirs[k] for k in ours])),
        "same_windows": our_windows == their_windows,
    }
    if args.without_kernels:
        plain_s, plain, _ = times["ours without kernels"]
        result["ours_without_kernels_questions_per_s"] = len(rows) / plain_s
        result["speedup_without_kernels"] = theirs_s / plain_s
        result["kernels_same_answers"] = float(np.mean([ours[k] == plain[k] for k in ours]))
    if args.roofline:
        work = encoder_flops(config, [len(ids) for ids in our_windows])
        peak = gemm_peak(config["hidden_size"], config["intermediate_size"], args.threads)
        result["model_gflop"] = work / 1e9
        result["ours_gflop_per_s"] = work / ours_s / 1e9
        result["transformers_gflop_per_s"] = work / theirs_s / 1e9
        result["gemm_peak_gflop_per_s"] = peak / 1e9
        result["ceiling_vs_transformers"] = peak / (work / theirs_s)
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


def default_spiece_dir(root: Path) -> str:
    """A folder holding a 1,000-piece SentencePiece model trained on a tenth of the embedded BBC
    News texts (bench/predict_throughput.py's)."""
    from predict_throughput import default_spiece  # bench/ beside this file: sys.path[0] for a script

    (root / "spiece").mkdir()
    default_spiece(root / "spiece")
    return str(root / "spiece")


if __name__ == "__main__":
    main()
