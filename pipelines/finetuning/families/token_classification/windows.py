"""Sentences of words as model inputs at any length, and their tags read back: what the evaluation
(training.py) and inference (inference.py) both do, so that they tag alike.

Each word is tokenized alone (a word with no piece gets the unknown piece) and tagged at its first
piece. A sentence whose pieces fit in max_seq_length is one feature, `[CLS] pieces [SEP]`. A longer
one is cut into windows of whole words, each starting about half a window after the last
(plan_windows), and each word takes its tag from the window where it has the most context
(tagged_from), as BERT's SQuAD windows choose a token's: no word is cut off, however long."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ...family import Feature
from ...tokenizer import PairTokenizer


def plan_windows(lengths: Sequence[int], budget: int) -> list[tuple[int, int]]:
    """Windows [start, end) of whole words whose pieces (`lengths`, each at most `budget`) fit in
    `budget`: one where all fit, else each as long as fits, the next starting at the first word at
    least half a budget of pieces after its start (and no later than its end: no word is skipped)."""
    if sum(lengths) <= budget:
        return [(0, len(lengths))]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    windows, start = [], 0
    while True:
        end = max(start + 1, int(np.searchsorted(offsets, offsets[start] + budget, side="right")) - 1)
        windows.append((start, end))
        if end >= len(lengths):
            return windows
        step = int(np.searchsorted(offsets, offsets[start] + budget // 2, side="left"))
        start = min(max(step, start + 1), end)


def tagged_from(lengths: Sequence[int], windows: Sequence[tuple[int, int]]) -> np.ndarray:
    """For each word, the window it is tagged from: of those holding it, the one where the fewer
    pieces on its shorter side (before or after it, within the window) are the most; the first of
    equals."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    best, choice = np.full(len(lengths), -1), np.zeros(len(lengths), np.int64)
    for index, (start, end) in enumerate(windows):
        words = np.arange(start, end)
        context = np.minimum(offsets[words] - offsets[start], offsets[end] - offsets[words + 1])
        better = context > best[start:end]
        best[start:end][better], choice[start:end][better] = context[better], index
    return choice


@dataclass(frozen=True)
class WordFeatures:
    features: list[Feature]
    owners: list[int]
    """features[i] is a window of sentence owners[i]."""
    places: list[tuple[np.ndarray, np.ndarray]]
    """Per sentence, where each word's tag is read: (its feature, its first piece's position there)."""


def encode_sentences(tokenizer: PairTokenizer, sentences: Sequence[Sequence[str]], max_length: int) -> WordFeatures:
    """The sentences' features, `max_length` tokens at most each, and where each word is tagged."""
    budget = max_length - 2  # [CLS] and [SEP]
    # one call for every word: SentencePiece's batch encoding gives each word's pieces as alone
    every = tokenizer.sp.encode([tokenizer.normalize(w) for w in chain.from_iterable(sentences)])
    unknown = [tokenizer.sp.unk_id()]
    features, owners, places, first = [], [], [], 0
    for owner, words in enumerate(sentences):
        pieces = [(p or unknown)[:budget] for p in every[first : first + len(words)]]
        first += len(words)
        lengths = [len(p) for p in pieces]
        windows = plan_windows(lengths, budget)
        chosen = tagged_from(lengths, windows) if len(windows) > 1 else np.zeros(len(words), np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        window_starts = np.array([start for start, _ in windows])[chosen]
        places.append((len(features) + chosen, 1 + offsets[:-1] - offsets[window_starts]))
        for start, end in windows:
            ids = [tokenizer.cls_id, *chain.from_iterable(pieces[start:end]), tokenizer.sep_id]
            features.append((ids, [0] * len(ids)))
            owners.append(owner)
    return WordFeatures(features, owners, places)


def read_tags(
    scores: np.ndarray, places: Sequence[tuple[np.ndarray, np.ndarray]], names: Sequence[str]
) -> list[list[str]]:
    """Each sentence's tags: the label of the highest score at each word's place ([features,
    positions, labels] scores)."""
    best = scores.argmax(-1)
    return [[names[k] for k in best[features, positions]] for features, positions in places]


__all__ = ["WordFeatures", "encode_sentences", "plan_windows", "read_tags", "tagged_from"]
