"""Batch prediction: `albert-ray predict` (the predict stage: Ray Data, an actor pool holding the
model, rows sorted by length within a block) against transformers' `pipeline("text-classification")`
on the same model and rows, in one run; and the predict stage's peak memory at two table sizes.

The model is a classification export of the given preset (random weights: speed and memory do not
depend on them; `--model` takes a real one), with 5 classes. The rows are synthetic BBC-like texts
of 5-120 words (seeded), in a csv. Ours runs through the stage's own code on a local Ray instance
with `--workers` replicas; its time is the stage's wall time (reading, predicting, writing parquet,
the manifest), Ray's start excluded. Transformers' runs in this process, `pipeline(...)(texts,
batch_size=--batch-size, truncation=True, max_length=--seq)`, on as many threads as ours has in all.
Agreement: the share of rows where both predict the same class (1.0 expected: the same weights and
token ids).

Memory: the peak summed USS of this process and every Ray worker process (sampled every 0.2 s with
psutil; the object store's shared pages left out) while the stage predicts `--rows` rows and
`--rows-large` rows: bounded memory means the two peaks are about equal.

    python bench/predict_throughput.py                           # tiny model, 20k rows vs pipeline, 100k for memory
    python bench/predict_throughput.py --preset base --rows 2000 --rows-large 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import torch

from albert_model import AlbertConfig, kernels
from albert_model.hf import save_hf_pretrained
from albert_model.model import AlbertForSequenceClassification

LABELS = ["business", "entertainment", "politics", "sport", "tech"]
WORDS = [
    "the",
    "market",
    "shares",
    "rose",
    "after",
    "the",
    "minister",
    "said",
    "that",
    "the",
    "match",
    "was",
    "won",
    "by",
    "the",
    "team",
    "in",
    "the",
    "final",
    "minutes",
    "while",
    "the",
    "film",
    "and",
    "the",
    "new",
    "phone",
    "were",
    "shown",
    "to",
    "the",
    "public",
    "at",
    "the",
    "show",
]


def write_rows(path: Path, n: int, seed: int = 0) -> list[str]:
    """`n` synthetic rows (id, text) as a csv; returns their texts."""
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(5, 121)))) for _ in range(n)]
    path.write_text("id,text\n" + "".join(f"r{i},{text}\n" for i, text in enumerate(texts)))
    return texts


def make_model(folder: Path, preset: str, spiece: str) -> str:
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(preset, vocab_size=1000).replace(num_labels=len(LABELS))
    model = AlbertForSequenceClassification(config).eval()
    return str(save_hf_pretrained(model, folder, spiece_model=spiece, id2label=dict(enumerate(LABELS))))


def default_spiece(root: Path) -> str:
    """A 1,000-piece SentencePiece model trained on a tenth of the embedded BBC News texts."""
    from pipelines.finetuning.tables import bbc_news_examples
    from pipelines.prep.text import normalize_text
    from pipelines.stages.vocab import train_sentencepiece

    lines = [s for t in bbc_news_examples().texts[::10] for s in t.splitlines() if s.strip()]
    spiece = str(root / "spiece.model")
    Path(spiece).write_bytes(train_sentencepiece([normalize_text(s) for s in lines], 1000, []))
    return spiece


class PeakRss:
    """The peak summed USS (memory no other process shares: the object store's shared pages, which
    every process that maps them would count again in its RSS, left out) of this process and its
    Ray workers, sampled in a thread."""

    def __init__(self) -> None:
        self.peak, self.running = 0, True
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def total(self) -> int:
        total = psutil.Process().memory_full_info().uss
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if cmd.startswith("ray::") or "default_worker.py" in cmd:
                with contextlib.suppress(psutil.Error):  # gone meanwhile
                    total += p.memory_full_info().uss
        return total

    def sample(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.total())
            time.sleep(0.2)

    def __enter__(self) -> PeakRss:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.running = False
        self.thread.join()


def run_ours(model: str, rows: Path, run_dir: Path, seq: int, batch: int, workers: int) -> tuple[float, dict, int]:
    from pipelines.config import load_config
    from pipelines.stages.predict import run_predict

    config = load_config(
        overrides=[
            f"run_dir={run_dir}",
            f"predict.model={model}",
            f"predict.input={rows}",
            "predict.id_column=id",
            f"predict.max_seq_length={seq}",
            f"predict.batch_size={batch}",
            f"predict.workers={workers}",
        ]
    )
    with PeakRss() as rss:
        started = time.perf_counter()
        out = run_predict(config)
        seconds = time.perf_counter() - started
    import pyarrow.parquet as pq

    table = pq.read_table(Path(out) / "predictions", columns=["id", "prediction"]).to_pydict()
    return seconds, dict(zip(table["id"], table["prediction"])), rss.peak


def run_transformers(model: str, rows: Path, seq: int, batch: int) -> tuple[float, dict]:
    import csv

    import transformers

    with open(rows) as f:
        records = list(csv.DictReader(f))
    pipe = transformers.pipeline("text-classification", model=model, tokenizer=model, device=-1)
    started = time.perf_counter()
    outputs = pipe([r["text"] for r in records], batch_size=batch, truncation=True, max_length=seq)
    seconds = time.perf_counter() - started
    return seconds, {r["id"]: o["label"] for r, o in zip(records, outputs)}


def replica_vs_pipeline(model: str, texts: list[str], seq: int, batch: int, device: str, dtype: str) -> dict:
    """Without Ray: the predict stage's replica code (`Predictor`, what each actor of the stage runs
    on its block of rows: encode, sort by length, pad per batch, the model) against
    `pipeline("text-classification")` on the same device, rows and dtype, both in this process.
    For a machine without Ray (the GPU image); the whole stage adds Ray Data's read and write.

    Each side goes over the rows twice: the first pass pays each padded width's first call (kernels,
    cuDNN's attention plans), the second is the steady state the speedup compares. The pipeline runs
    once more under ours' attention backends (kernels.inference_attention); its faster steady pass is the one
    compared."""
    import transformers

    from pipelines.inference.predictor import Predictor

    torch_dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def say(what: str) -> None:  # progress with times: a hang shows where it is
        print(f"predict {dtype} on {device}: {what} at {time.perf_counter() - begun:.1f} s", flush=True)

    begun = time.perf_counter()
    predictor = Predictor.load(model, seq, batch, device, precision=dtype)  # predict.precision
    assert next(predictor.model.parameters()).dtype == torch_dtype
    rows = [{"text": text} for text in texts]

    def ours_pass() -> tuple[list, float, float]:
        started = time.perf_counter()
        encoded = predictor.encode(rows)
        encode_s = time.perf_counter() - started
        answers = predictor.answers(rows, encoded, predictor.outputs(encoded))
        sync()
        return answers, encode_s, time.perf_counter() - started

    _, _, ours_cold_s = ours_pass()
    ours, encode_s, ours_s = ours_pass()
    say(f"ours done ({len(texts) / ours_cold_s:.0f} rows/s first, {len(texts) / ours_s:.0f} after)")
    pipe = transformers.pipeline(
        "text-classification", model=model, tokenizer=model, device=torch.device(device), dtype=torch_dtype
    )

    def their_pass() -> tuple[list, float]:
        started = time.perf_counter()
        outputs = pipe(texts, batch_size=batch, truncation=True, max_length=seq)
        sync()
        return outputs, time.perf_counter() - started

    _, theirs_cold_s = their_pass()
    outputs, theirs_default_s = their_pass()
    with kernels.inference_attention(torch.device(device)):
        _, theirs_same_s = their_pass()
    say(f"pipeline done ({len(texts) / theirs_default_s:.0f} rows/s; {len(texts) / theirs_same_s:.0f} as ours attends)")
    theirs_s = min(theirs_default_s, theirs_same_s)
    agreement = float(np.mean([o["prediction"] == t["label"] for o, t in zip(ours, outputs)]))
    return {
        "device": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "dtype": dtype,
        "rows": len(texts),
        "seq": seq,
        "batch_size": batch,
        "ours_rows_per_s": len(texts) / ours_s,
        "ours_first_pass_rows_per_s": len(texts) / ours_cold_s,
        "ours_encode_s": encode_s,
        "ours_total_s": ours_s,
        "transformers_rows_per_s": len(texts) / theirs_s,
        "transformers_first_pass_rows_per_s": len(texts) / theirs_cold_s,
        "transformers_default_rows_per_s": len(texts) / theirs_default_s,
        "transformers_same_attention_rows_per_s": len(texts) / theirs_same_s,
        "transformers_total_s": theirs_s,
        "speedup": theirs_s / ours_s,
        "agreement": agreement,
    }


def suite_configs(args, specs: str, name: str, run: Callable[[str, int, int, str], dict]) -> dict:
    """Per `preset-seq:N:dtype` of the comma-separated `specs`: a random-weight classification export
    of the preset (5 classes, the args.predict_spiece vocabulary) and `run(model, seq, N, dtype)`; a
    config's failure is recorded as its result, not raised (it must not hide the others)."""
    out = {}
    for spec in specs.split(","):
        config, n, dtype = spec.split(":")
        preset, seq = config.rsplit("-", 1)
        try:
            with tempfile.TemporaryDirectory() as work:
                out[spec] = run(make_model(Path(work) / "model", preset, args.predict_spiece), int(seq), int(n), dtype)
        except Exception as error:
            out[spec] = {"error": f"{type(error).__name__}: {error}"}
        print(f"{name} {spec}: {json.dumps(out[spec], default=str)}", flush=True)
    return out


def result_lines(name: str, results: dict, line: Callable[[dict], str]) -> list[str]:
    """One line per config of suite_configs' `results` (`line` of a result; an error as it is)."""
    return [
        f"{name} {spec}: " + (str(r)[:200] if "error" in r or "speedup" not in r else line(r))
        for spec, r in results.items()
    ]


def suite_phase(args, device: str) -> dict:
    """bench/gpu_suite.py's predict phase: replica_vs_pipeline on `device` over args.predict_rows
    synthetic rows, per `preset-seq:batch:dtype` of args.predict."""
    texts = write_rows(args.out / "predict-rows.csv", args.predict_rows)
    return suite_configs(
        args,
        args.predict,
        "predict",
        lambda model, seq, batch, dtype: replica_vs_pipeline(model, texts, seq, batch, device, dtype),
    )


def suite_lines(results: dict) -> list[str]:
    """suite_phase's results, a line each, for bench/gpu_suite.py's table."""
    return result_lines(
        "predict",
        results,
        lambda r: (
            f"ours {r['ours_rows_per_s']:.0f} rows/s (first pass {r['ours_first_pass_rows_per_s']:.0f}, encode "
            f"{r['ours_encode_s']:.2f} s), pipeline {r['transformers_rows_per_s']:.0f} rows/s (first pass "
            f"{r['transformers_first_pass_rows_per_s']:.0f}), {r['speedup']:.2f}x, same class {r['agreement']:.4f}"
        ),
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", help="a classification export to use instead of a random one")
    parser.add_argument("--spiece", help="its SentencePiece model (default: one trained on the embedded corpus)")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rows-large", type=int, default=100_000, help="the memory run's size (0: none)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=2, help="Ray's logical CPUs")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--no-ray",
        action="store_true",
        help="the stage's replica code (Predictor) in this process instead of the stage (see replica_vs_pipeline)",
    )
    parser.add_argument("--device", default="cpu", help="with --no-ray: cpu or cuda")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="with --no-ray, for both sides")
    args = parser.parse_args(argv)
    if args.no_ray:
        with tempfile.TemporaryDirectory() as work:
            root = Path(work)
            spiece = args.spiece or default_spiece(root)
            model = args.model or make_model(root / "model", args.preset, spiece)
            texts = write_rows(root / "rows.csv", args.rows)
            result = replica_vs_pipeline(model, texts, args.seq, args.batch_size, args.device, args.dtype)
        print(json.dumps(result, indent=2))
        if args.out:
            Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        return result

    import ray

    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        spiece = args.spiece
        if spiece is None and args.model is None:
            spiece = default_spiece(root)
        model = args.model or make_model(root / "model", args.preset, spiece)
        write_rows(root / "rows.csv", args.rows)
        if not ray.is_initialized():
            ray.init(num_cpus=args.cpus, include_dashboard=False, logging_level="WARNING")
        ours_s, ours, peak = run_ours(model, root / "rows.csv", root / "run", args.seq, args.batch_size, args.workers)
        torch.set_num_threads(max(1, args.workers))
        theirs_s, theirs = run_transformers(model, root / "rows.csv", args.seq, args.batch_size)
        agreement = float(np.mean([ours[k] == theirs[k] for k in theirs]))
        result = {
            "preset": args.preset,
            "rows": args.rows,
            "seq": args.seq,
            "ours_rows_per_s": args.rows / ours_s,
            "transformers_rows_per_s": args.rows / theirs_s,
            "speedup": theirs_s / ours_s,
            "agreement": agreement,
            "peak_uss_mb": {args.rows: peak / 2**20},
        }
        if args.rows_large:
            write_rows(root / "large.csv", args.rows_large, seed=1)
            _, large, peak_large = run_ours(
                model, root / "large.csv", root / "run-large", args.seq, args.batch_size, args.workers
            )
            assert len(large) == args.rows_large
            result["peak_uss_mb"][args.rows_large] = peak_large / 2**20
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
