"""The first hour's commands, timed as a user runs them (issue #45): `albert-ray predict` over 200
BBC News articles, a fresh process end to end (start, imports, reading, the model, parquet, the
manifest), against a plain script in a fresh process that imports transformers, loads the same
model and runs `pipeline("text-classification")` over the same texts; and `albert-ray serve`'s
time from its start to its first answer.

The model is a classification export of `--preset` (make run's preset, tiny, by default) with random
weights and a 1,000-piece SentencePiece model of the embedded corpus (speed does not depend on the
weights; `--model` takes a real one), both sides at `--seq` tokens. The two predict commands run in
alternating rounds (`--rounds`), each figure the median; agreement is the share of rows both label
alike (1.0 expected: the same weights and token ids). serve is started `--serve-rounds` times on a
free port; its figure is the time until a POST of one article answers 200, and it says whether it
joined a running local head (`albert-ray local start`) or started a Ray of its own.

    python bench/first_answers.py                      # tiny, 200 articles, 3 rounds, serve once
    python bench/first_answers.py --serve-rounds 0     # predict only
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
from predict_throughput import default_spiece, make_model  # bench/ beside this file: sys.path[0] for a script

BIN = Path(sys.executable).parent
TRANSFORMERS_SCRIPT = """
import csv, json, sys
from transformers import pipeline
model, rows, seq, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
texts = [row["text"] for row in csv.DictReader(open(rows, newline=""))]
classify = pipeline("text-classification", model=model, device=-1)
answers = classify(texts, batch_size=64, truncation=True, max_length=seq)
json.dump([a["label"] for a in answers], open(out, "w"))
"""


def write_articles(path: Path, n: int) -> list[str]:
    """The first `n` BBC News articles of the embedded corpus as a csv of id and text."""
    from pipelines.finetuning.tables import bbc_news_examples

    texts = bbc_news_examples().texts[:n]
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows((f"a{i}", text) for i, text in enumerate(texts))
    return texts


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return time.perf_counter() - start


def predict_round(model: str, rows: Path, root: Path, seq: int, k: int) -> tuple[float, float, float]:
    """(ours, transformers', agreement) of one round, each side a fresh process."""
    run_dir = root / f"run{k}"
    ours = timed(
        [
            str(BIN / "albert-ray"),
            "predict",
            f"run_dir={run_dir}",
            f"predict.model={model}",
            f"predict.input={rows}",
            "predict.id_column=id",
            f"predict.max_seq_length={seq}",
        ],
        root,
    )
    script = root / "pipeline_script.py"
    script.write_text(TRANSFORMERS_SCRIPT)
    labels = root / f"labels{k}.json"
    theirs = timed([sys.executable, str(script), model, str(rows), str(seq), str(labels)], root)
    got = {r["id"]: r["prediction"] for r in pq.read_table(run_dir / "predict" / "predictions").to_pylist()}
    expected = json.loads(labels.read_text())
    agree = sum(got[f"a{i}"] == label for i, label in enumerate(expected)) / len(expected)
    return ours, theirs, agree


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_first_answer(model: str, text: str, seq: int, root: Path, timeout: float = 300.0) -> tuple[float, str]:
    """(seconds from `albert-ray serve`'s start to a 200 answer, its line saying which Ray it uses)."""
    port = free_port()
    log = (root / f"serve-{port}.log").open("w+")
    command = [str(BIN / "albert-ray"), "serve", model, "--port", str(port), "--max-seq-length", str(seq)]
    body = json.dumps({"text": text}).encode()
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while time.perf_counter() - start < timeout:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"serve exited {process.returncode}: {log.read()[-2000:]}")
            request = urllib.request.Request(f"http://127.0.0.1:{port}/predict", data=body)
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    if answer.status == 200:
                        elapsed = time.perf_counter() - start
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.2)
        else:
            raise RuntimeError(f"no answer within {timeout:.0f} s")
    finally:
        process.send_signal(signal.SIGINT)  # as Ctrl-C: serve shuts its Serve down
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
    log.seek(0)
    ray_line = next((line.strip() for line in log if line.startswith("ray: ")), "")
    return elapsed, ray_line


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", help="a classification export to use instead of a random one")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--serve-rounds", type=int, default=1)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="first-answers-") as tmp:
        root = Path(tmp)
        model = args.model or make_model(root / "model", args.preset, default_spiece(root))
        texts = write_articles(root / "articles.csv", args.rows)
        rounds = [predict_round(model, root / "articles.csv", root, args.seq, k) for k in range(args.rounds)]
        ours, theirs = statistics.median(r[0] for r in rounds), statistics.median(r[1] for r in rounds)
        result = {
            "rows": len(texts),
            "predict_s": [round(r[0], 2) for r in rounds],
            "pipeline_s": [round(r[1], 2) for r in rounds],
            "predict_median_s": round(ours, 2),
            "pipeline_median_s": round(theirs, 2),
            "ratio": round(ours / theirs, 2),
            "agreement": min(r[2] for r in rounds),
        }
        serves = [serve_first_answer(model, texts[0], args.seq, root) for _ in range(args.serve_rounds)]
        if serves:
            result["serve_first_answer_s"] = [round(s, 1) for s, _ in serves]
            result["serve_ray"] = serves[0][1]
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
