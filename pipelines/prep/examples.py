"""Masked-LM training examples from one tokenized document (ALBERT's create_instances_from_document),
with one of three sentence objectives (data.sentence_objective):

- `sop` (ALBERT): two consecutive spans of the document, kept in order (label 0) or swapped (1);
- `nsp` (BERT): span A and either what follows it in the document (label 0) or a span of another
  document drawn from a seeded pool (label 1; pipelines/prep/negatives.py);
- `none`: one span per example, `[CLS] text [SEP]`, no label.

Every random choice comes from a generator seeded by (seed, document key, dupe), so the examples of
a document are the same whichever worker or block processes it. A pair needs a chunk of at least two
segments: SOP never takes a segment from another document (the original's fallback for a
one-segment chunk, which is NSP, not sentence order), and NSP's labels stay balanced (the original
forced a random next segment there).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .masking import CLS_ID, SEP_ID, MaskedExample, MaskingSpec, mask_tokens


class Negatives(Protocol):
    """Where NSP's segment B of a negative comes from (pipelines/prep/negatives.py: NegativePool)."""

    def draw(self, doc_key: str, min_tokens: int, rng: np.random.Generator) -> np.ndarray:
        """Consecutive segments of a document other than `doc_key`, about `min_tokens` tokens or more."""


@dataclass(frozen=True)
class PairingSpec:
    max_seq_length: int
    short_seq_prob: float
    objective: str = "sop"
    """data.sentence_objective: sop, nsp or none."""

    @property
    def max_num_tokens(self) -> int:
        if self.objective == "none":
            return self.max_seq_length - 2  # [CLS] text [SEP]
        return self.max_seq_length - 3  # [CLS] A [SEP] B [SEP]

    @property
    def max_segment_tokens(self) -> int:
        """Longer sentences are cut into pieces of at most this many tokens, so two always fit."""
        return max(1, self.max_num_tokens // 2)


@dataclass
class Pair:
    tokens_a: np.ndarray
    tokens_b: np.ndarray | None  # None: one segment (no sentence objective)
    sentence_order_label: int | None  # sop: 0 A then B as in the document, 1 swapped;
    # nsp: 0 B follows A in the document, 1 B from another document; none: None
    is_short: bool  # drew a short target length (short_seq_prob)


@dataclass
class Example:
    input_ids: np.ndarray  # int32, [CLS] A [SEP] B [SEP] (or [CLS] A [SEP]), masked when static
    token_type_ids: np.ndarray  # int8
    sentence_order_label: int | None
    masked: MaskedExample | None  # static masking
    word_starts: np.ndarray | None  # dynamic masking: where whole words start
    is_short: bool


def stable_hash(*parts: object) -> int:
    """64-bit hash of the parts' text, the same in every process (unlike hash())."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def document_rng(seed: int, doc_key: str, dupe: int) -> np.random.Generator:
    h = stable_hash(doc_key)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, h >> 32, h & 0xFFFFFFFF, dupe])))


def is_validation_document(seed: int, doc_key: str, fraction: float) -> bool:
    """Split by document: a document's examples all land in one split."""
    return stable_hash("validation", seed, doc_key) / 2.0**64 < fraction


def split_long_segments(segments: list[np.ndarray], max_tokens: int) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    for seg in segments:
        if len(seg) <= max_tokens:
            out.append(seg)
        else:
            out.extend(seg[i : i + max_tokens] for i in range(0, len(seg), max_tokens))
    return [seg for seg in out if len(seg)]


def truncate_pair(
    a: np.ndarray, b: np.ndarray, max_num_tokens: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Remove tokens from the longer segment until the pair fits, each from the front or the
    back at random (the original's truncate_seq_pair, with the counts computed directly)."""
    la, lb = len(a), len(b)
    excess = la + lb - max_num_tokens
    if excess <= 0:
        return a, b
    # Removing from the longer one (B on ties) one token at a time: first down to equal
    # lengths, then alternately, B first.
    take = min(excess, abs(la - lb))
    ra, rb = (take, 0) if la > lb else (0, take)
    rest = excess - take
    ra += rest // 2
    rb += rest - rest // 2
    fa, fb = rng.binomial(ra, 0.5), rng.binomial(rb, 0.5)
    return a[fa : la - (ra - fa)], b[fb : lb - (rb - fb)]


def draw_target(spec: PairingSpec, rng: np.random.Generator) -> tuple[bool, int]:
    """A chunk's target length: the most tokens, or with probability short_seq_prob one in [2, most]."""
    max_num = spec.max_num_tokens
    short = rng.random() < spec.short_seq_prob
    return short, int(rng.integers(2, max_num + 1)) if short else max_num


def create_pairs(segments: list[np.ndarray], spec: PairingSpec, rng: np.random.Generator) -> list[Pair]:
    """Accumulate consecutive segments up to a target length, split at a random segment
    boundary into A and B, swap with probability 0.5 (SOP), truncate to fit."""
    max_num = spec.max_num_tokens
    short, target = draw_target(spec, rng)
    pairs: list[Pair] = []
    chunk: list[np.ndarray] = []
    length = 0
    for i, seg in enumerate(segments):
        chunk.append(seg)
        length += len(seg)
        if (i == len(segments) - 1 or length >= target) and len(chunk) >= 2:
            a_end = int(rng.integers(1, len(chunk)))
            a, b = np.concatenate(chunk[:a_end]), np.concatenate(chunk[a_end:])
            label = int(rng.random() < 0.5)
            if label:
                a, b = b, a
            a, b = truncate_pair(a, b, max_num, rng)
            pairs.append(Pair(a, b, label, short))
            chunk, length = [], 0
            short, target = draw_target(spec, rng)
    return pairs


def create_nsp_pairs(
    segments: list[np.ndarray], spec: PairingSpec, rng: np.random.Generator, pool: Negatives, doc_key: str
) -> list[Pair]:
    """BERT's next-sentence pairs: chunks as `create_pairs` makes them, split at a random segment
    boundary into A and B; with probability 0.5 B is replaced (label 1) by segments of another
    document from `pool`, up to the rest of the target length, and the chunk's unused segments are
    put back to start the next chunk (the original's `i -= num_unused_segments`); truncate to fit."""
    short, target = draw_target(spec, rng)
    pairs: list[Pair] = []
    chunk: list[np.ndarray] = []
    length, i = 0, 0
    while i < len(segments):
        chunk.append(segments[i])
        length += len(segments[i])
        if (i == len(segments) - 1 or length >= target) and len(chunk) >= 2:
            a_end = int(rng.integers(1, len(chunk)))
            a = np.concatenate(chunk[:a_end])
            label = int(rng.random() < 0.5)
            if label:
                b = pool.draw(doc_key, target - len(a), rng)
                i -= len(chunk) - a_end
            else:
                b = np.concatenate(chunk[a_end:])
            a, b = truncate_pair(a, b, spec.max_num_tokens, rng)
            pairs.append(Pair(a, b, label, short))
            chunk, length = [], 0
            short, target = draw_target(spec, rng)
        i += 1
    return pairs


def create_single_segments(segments: list[np.ndarray], spec: PairingSpec, rng: np.random.Generator) -> list[Pair]:
    """No sentence objective: consecutive segments up to a target length, one example each, cut to fit
    at the front or the back at random. A one-segment document makes an example too."""
    short, target = draw_target(spec, rng)
    spans: list[Pair] = []
    chunk: list[np.ndarray] = []
    length = 0
    for i, seg in enumerate(segments):
        chunk.append(seg)
        length += len(seg)
        if i == len(segments) - 1 or length >= target:
            a = np.concatenate(chunk)
            a, _ = truncate_pair(a, a[:0], spec.max_num_tokens, rng)
            spans.append(Pair(a, None, None, short))
            chunk, length = [], 0
            short, target = draw_target(spec, rng)
    return spans


def assemble(a: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """[CLS] A [SEP] B [SEP] with token types 0 up to the first [SEP], 1 after; [CLS] A [SEP] (all 0) without B."""
    if b is None:
        ids = np.concatenate([[CLS_ID], a, [SEP_ID]]).astype(np.int32)
        return ids, np.zeros(len(ids), dtype=np.int8)
    ids = np.concatenate([[CLS_ID], a, [SEP_ID], b, [SEP_ID]]).astype(np.int32)
    token_types = np.zeros(len(ids), dtype=np.int8)
    token_types[len(a) + 2 :] = 1
    return ids, token_types


def create_spans(
    segments: list[np.ndarray],
    spec: PairingSpec,
    rng: np.random.Generator,
    pool: Negatives | None = None,
    doc_key: str = "",
) -> list[Pair]:
    """The document's pairs (or single spans) for spec.objective; nsp draws its negatives from `pool`."""
    if spec.objective == "nsp":
        if pool is None:
            raise ValueError("data.sentence_objective=nsp needs a pool of negative documents")
        return create_nsp_pairs(segments, spec, rng, pool, doc_key)
    if spec.objective == "none":
        return create_single_segments(segments, spec, rng)
    return create_pairs(segments, spec, rng)


def document_examples(
    segments: list[np.ndarray],
    pairing: PairingSpec,
    masking: MaskingSpec,
    word_start_table: np.ndarray,
    rng: np.random.Generator,
    static: bool,
    pool: Negatives | None = None,
    doc_key: str = "",
) -> list[Example]:
    """All examples of one document (`doc_key`) for one dupe. `segments` are its sentences' token ids,
    already cut to `pairing.max_segment_tokens` (split_long_segments); `pool`: nsp's negatives."""
    examples = []
    for pair in create_spans(segments, pairing, rng, pool, doc_key):
        ids, token_types = assemble(pair.tokens_a, pair.tokens_b)
        word_starts = word_start_table[ids]
        if static:
            masked = mask_tokens(ids, word_starts, masking, rng)
            examples.append(
                Example(masked.input_ids, token_types, pair.sentence_order_label, masked, None, pair.is_short)
            )
        else:
            examples.append(Example(ids, token_types, pair.sentence_order_label, None, word_starts, pair.is_short))
    return examples


__all__ = [
    "PairingSpec",
    "Pair",
    "Example",
    "Negatives",
    "create_nsp_pairs",
    "create_pairs",
    "create_single_segments",
    "create_spans",
    "draw_target",
    "truncate_pair",
    "split_long_segments",
    "assemble",
    "document_examples",
    "document_rng",
    "is_validation_document",
    "stable_hash",
]
