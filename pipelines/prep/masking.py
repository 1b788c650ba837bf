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
_PUNCTUATION = set('!"#$%&\'()*+,-./:;?@[\\]^_`{|}~')


def word_start_table(pieces: list[str]) -> np.ndarray:
    """For every vocabulary id: does this piece begin a new word?"""
    return np.array([p.startswith("\u2581") or p.startswith("<") or p in _PUNCTUATION for p in pieces],
                    dtype=bool)


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
    ends = np.where(next_boundary < len(boundaries), boundaries[np.minimum(next_boundary, len(boundaries) - 1)],
                    len(input_ids))
    return np.stack([start_idx, ends], axis=1) if len(start_idx) else np.zeros((0, 2), dtype=np.int64)


def mask_tokens(input_ids: np.ndarray, word_starts: np.ndarray, spec: MaskingSpec,
                rng: np.random.Generator) -> MaskedExample:
    """Mask whole-word n-grams until num_to_predict tokens are chosen (no overlaps), then replace
    each chosen token with [MASK] (80%), itself (10%) or a random ordinary piece (10%)."""
    spans = word_spans(input_ids, word_starts)
    num_to_predict = spec.num_to_predict(len(input_ids))
    chosen: list[int] = []
    lengths: list[int] = []
    covered = np.zeros(len(input_ids), dtype=bool)
    pvals = spec.ngram_probabilities()
    # An n-gram is n adjacent words: it never reaches over a [SEP] into the other segment.
    run = np.ones(len(spans), dtype=np.int64)
    for w in range(len(spans) - 2, -1, -1):
        if spans[w, 1] == spans[w + 1, 0]:
            run[w] = run[w + 1] + 1
    order = rng.permutation(len(spans))
    ngram_draws = rng.choice(len(pvals), size=len(spans), p=pvals) + 1
    for w, n in zip(order.tolist(), ngram_draws.tolist()):
        if len(chosen) >= num_to_predict:
            break
        n = min(n, int(run[w]))
        # Shrink the n-gram until it fits the remaining budget (as the original does).
        while n > 0 and len(chosen) + (spans[w + n - 1, 1] - spans[w, 0]) > num_to_predict:
            n -= 1
        if n == 0:
            continue
        start, end = spans[w, 0], spans[w + n - 1, 1]
        if covered[start:end].any():
            continue
        covered[start:end] = True
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


__all__ = ["MaskingSpec", "MaskedExample", "mask_tokens", "word_spans", "word_start_table",
           "PAD_ID", "UNK_ID", "CLS_ID", "SEP_ID", "MASK_ID", "FIRST_ORDINARY_ID"]
