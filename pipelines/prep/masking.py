"""Whole-word n-gram masking (ALBERT's create_pretraining_data), seeded and vectorised with numpy.

The original's known bugs are fixed here: the n-gram length comes from the caller's seeded
generator (the original used numpy's unseeded global RNG), and random replacements are drawn
only from ordinary pieces, never from the control symbols.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
FIRST_ORDINARY_ID = 5  # ids below are <pad>, <unk>, [CLS], [SEP], [MASK]

# A piece starts a word when it begins with the SentencePiece space marker, is a control or
# user symbol written <...>, or is one punctuation character (as in the original).
_PUNCTUATION = set("!\"#$%&'()*+,-./:;?@[\\]^_`{|}~")


def word_start_table(pieces: list[str]) -> np.ndarray:
    """For every vocabulary id: does this piece begin a new word?"""
    return np.array([p.startswith("\u2581") or p.startswith("<") or p in _PUNCTUATION for p in pieces], dtype=bool)


@dataclass(frozen=True)
class MaskingSpec:
    masked_lm_prob: float
    max_predictions_per_seq: int
    ngram: int
    vocab_size: int

    def num_to_predict(self, num_tokens: int) -> int:
        return min(self.max_predictions_per_seq, max(1, int(round(num_tokens * self.masked_lm_prob))))

    def ngram_probabilities(self) -> np.ndarray:
        """n in 1..ngram with probability proportional to 1/n (favor_shorter_ngram)."""
        p = 1.0 / np.arange(1, self.ngram + 1)
        return p / p.sum()


@dataclass
class MaskedExample:
    input_ids: np.ndarray  # int32, masked positions already replaced
    positions: np.ndarray  # int32, ascending
    labels: np.ndarray  # int32, the original ids at `positions`
    ngram_lengths: np.ndarray  # int8, length in words of each masked n-gram (statistics)
    replacement: np.ndarray  # int8 per position: 0 [MASK], 1 kept, 2 random piece (statistics)


def word_spans(input_ids: np.ndarray, word_starts: np.ndarray) -> np.ndarray:
    """(start, end) token spans of the maskable whole words; control symbols are never maskable."""
    maskable = input_ids >= FIRST_ORDINARY_ID
    starts = maskable & (word_starts | ~np.concatenate([[False], maskable[:-1]]))
    start_idx = np.flatnonzero(starts)
    # A word ends where the next word starts or at the next non-maskable token.
    boundaries = np.flatnonzero(starts | ~maskable)
    next_boundary = np.searchsorted(boundaries, start_idx, side="right")
    ends = np.where(
        next_boundary < len(boundaries), boundaries[np.minimum(next_boundary, len(boundaries) - 1)], len(input_ids)
    )
    return np.stack([start_idx, ends], axis=1) if len(start_idx) else np.zeros((0, 2), dtype=np.int64)


def adjacent_run_lengths(spans: np.ndarray, longest: int) -> np.ndarray:
    """For each word, how many words (up to `longest`) follow it with no gap: an n-gram is n
    adjacent words and never reaches over a [SEP] into the other segment."""
    n = len(spans)
    adjacent = np.zeros(n, dtype=bool)  # adjacent[w]: word w + 1 starts where word w ends
    adjacent[:-1] = spans[1:, 0] == spans[:-1, 1]
    run = np.ones(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    for k in range(1, longest):
        step = np.zeros(n, dtype=bool)
        step[: n - k] = adjacent[k - 1 : n - 1]
        alive &= step
        run += alive
    return run


def mask_tokens(
    input_ids: np.ndarray, word_starts: np.ndarray, spec: MaskingSpec, rng: np.random.Generator
) -> MaskedExample:
    """Mask whole-word n-grams until num_to_predict tokens are chosen (no overlaps), then replace
    each chosen token with [MASK] (80%), itself (10%) or a random ordinary piece (10%)."""
    spans = word_spans(input_ids, word_starts)
    num_to_predict = spec.num_to_predict(len(input_ids))
    pvals = spec.ngram_probabilities()
    run = adjacent_run_lengths(spans, spec.ngram)
    order = rng.permutation(len(spans))
    cdf = np.cumsum(pvals)
    cdf[-1] = 1.0
    ngram_draws = np.searchsorted(cdf, rng.random(len(spans)), side="right") + 1
    # Plain Python over the few candidates tried (~num_to_predict): numpy per item is slower.
    starts, ends, run = spans[:, 0].tolist(), spans[:, 1].tolist(), run.tolist()
    covered = bytearray(len(input_ids))
    chosen: list[int] = []
    lengths: list[int] = []
    for w, n in zip(order.tolist(), ngram_draws.tolist()):
        if len(chosen) >= num_to_predict:
            break
        n = min(n, run[w])
        # Shrink the n-gram until it fits the remaining budget (as the original does).
        while n > 0 and len(chosen) + ends[w + n - 1] - starts[w] > num_to_predict:
            n -= 1
        if n == 0:
            continue
        start, end = starts[w], ends[w + n - 1]
        if any(covered[start:end]):
            continue
        covered[start:end] = b"\x01" * (end - start)
        chosen.extend(range(start, end))
        lengths.append(n)
    positions = np.sort(np.asarray(chosen, dtype=np.int32))
    labels = input_ids[positions].astype(np.int32)
    draw = rng.random(len(positions))
    replacement = np.where(draw < 0.8, 0, np.where(draw < 0.9, 1, 2)).astype(np.int8)
    masked = input_ids.astype(np.int32, copy=True)
    masked[positions[replacement == 0]] = MASK_ID
    random_pos = positions[replacement == 2]
    masked[random_pos] = rng.integers(FIRST_ORDINARY_ID, spec.vocab_size, size=len(random_pos))
    return MaskedExample(masked, positions, labels, np.asarray(lengths, dtype=np.int8), replacement)


__all__ = [
    "MaskingSpec",
    "MaskedExample",
    "mask_tokens",
    "word_spans",
    "word_start_table",
    "PAD_ID",
    "UNK_ID",
    "CLS_ID",
    "SEP_ID",
    "MASK_ID",
    "FIRST_ORDINARY_ID",
]
