"""NSP's negative segments: a bounded, seeded pool of documents that segment B is drawn from.

BERT's and ALBERT's create_pretraining_data take a random next sentence from a random other
document of the whole corpus, held in memory. Here the documents are processed one at a time by
any number of workers, so the corpus is not at hand: the data stage first gathers, per split, the
`data.nsp_pool_documents` documents with the smallest `pool_hash` (a bottom-k sample: the same
documents whatever the workers or work units, as the vocabulary's sentence sample;
pipelines/stages/data_pool.py), each as a window of whole segments of at most `window_tokens`, and
every worker draws from that pool. A document never draws from itself; a split whose pool holds no
other document (a validation split of one document) draws from the training pool.
"""

from __future__ import annotations

import functools
import heapq
from dataclasses import dataclass

import numpy as np

from .examples import stable_hash


def pool_hash(seed: int, doc_key: str) -> int:
    """The seeded hash that ranks documents for the pool (independent of the split's and the vocabulary's)."""
    return stable_hash("nsp", seed, doc_key)


def window_tokens(max_seq_length: int) -> int:
    """The most tokens of one document a pool keeps: room for a random start under a full segment B."""
    return 2 * max_seq_length


def pool_window(segments: list[np.ndarray], seed: int, doc_key: str, max_tokens: int) -> list[np.ndarray]:
    """Consecutive whole segments of a document, at most `max_tokens` (at least one segment): the whole
    document when it fits, else a window from a seeded random segment on (extended backwards when
    the document ends first)."""
    if sum(len(s) for s in segments) <= max_tokens:
        return segments
    start = stable_hash("nsp window", seed, doc_key) % len(segments)
    end, total = start, 0
    while end < len(segments) and (end == start or total + len(segments[end]) <= max_tokens):
        total += len(segments[end])
        end += 1
    while start > 0 and total + len(segments[start - 1]) <= max_tokens:
        start -= 1
        total += len(segments[start])
    return segments[start:end]


def smallest(candidates: list[tuple], k: int) -> list[tuple]:
    """The `k` candidates (hash, key, ...) with the smallest (hash, key), in that order: a total order
    (keys are unique), so the k smallest of the units' k smallest are the k smallest of all."""
    return heapq.nsmallest(k, candidates, key=lambda c: (c[0], c[1]))


@dataclass(frozen=True)
class NegativePool:
    """One split's pool: documents (by key) and their windows, as flat int32 token ids."""

    keys: tuple[str, ...]
    tokens: np.ndarray
    """Every segment's ids, document after document."""
    segment_starts: np.ndarray
    """Offsets into `tokens`: segment i is tokens[segment_starts[i]:segment_starts[i + 1]]."""
    document_starts: np.ndarray
    """Offsets into the segments: document j holds segments document_starts[j]..document_starts[j + 1] - 1."""

    @classmethod
    def build(cls, documents: list[tuple[str, list[np.ndarray]]]) -> NegativePool:
        """From (key, segments) pairs; documents without segments are left out."""
        documents = [(key, segs) for key, segs in documents if segs]
        segments = [s for _, segs in documents for s in segs]
        lengths = np.array([len(s) for s in segments], dtype=np.int64)
        counts = np.array([len(segs) for _, segs in documents], dtype=np.int64)
        return cls(
            keys=tuple(key for key, _ in documents),
            tokens=np.concatenate(segments).astype(np.int32) if segments else np.zeros(0, np.int32),
            segment_starts=np.concatenate([[0], np.cumsum(lengths)]),
            document_starts=np.concatenate([[0], np.cumsum(counts)]),
        )

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {key: j for j, key in enumerate(self.keys)}

    def others(self, doc_key: str) -> int:
        """How many documents of the pool a document can draw from (all but itself)."""
        return len(self.keys) - (doc_key in self._index)

    def draw(self, doc_key: str, min_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """Segment B of a negative, as BERT draws it: a random other document, a random segment in it,
        then the segments after it until `min_tokens` are reached (at least one; fewer at its end)."""
        own = self._index.get(doc_key)
        j = int(rng.integers(self.others(doc_key)))
        if own is not None and j >= own:
            j += 1
        first, stop = int(self.document_starts[j]), int(self.document_starts[j + 1])
        start = first + int(rng.integers(stop - first))
        ends = self.segment_starts[start + 1 : stop + 1]
        last = start + min(int(np.searchsorted(ends - self.segment_starts[start], min_tokens)), stop - start - 1)
        return self.tokens[self.segment_starts[start] : self.segment_starts[last + 1]]


@dataclass(frozen=True)
class NegativePools:
    """The pools of both splits, handed to every data worker."""

    train: NegativePool
    validation: NegativePool

    def for_document(self, split: str, doc_key: str) -> NegativePool:
        """The pool a document of `split` draws from: its split's, or the training pool where that
        holds no other document."""
        own = self.validation if split == "validation" else self.train
        return own if own.others(doc_key) else self.train


__all__ = ["NegativePool", "NegativePools", "pool_hash", "pool_window", "smallest", "window_tokens"]
