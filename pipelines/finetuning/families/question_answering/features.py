"""Extractive QA features: a question and its context -> `[CLS] question [SEP] window [SEP]` windows
whose context tokens carry their character spans in the original context, with the answer's token
positions, as ALBERT's run_squad lays them out (transformers' `prepare_train_features` and
`prepare_validation_features` in one)."""

from __future__ import annotations

import bisect
import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from ...tokenizer import PairTokenizer
from .postprocess import Window

Span = tuple[int, int]


@dataclass(frozen=True)
class QAExample:
    """One SQuAD question. `answers` are (text, answer_start) pairs, answer_start being the text's
    character index in `context` (SQuAD's `answers.answer_start`); the first one is the training
    target; none for an unanswerable question (SQuAD 2.0's is_impossible)."""

    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class QAFeature:
    """One window of an example: `input_ids` and `token_type_ids` unpadded (pad_batch pads them);
    `offsets[t]` is the (start, end) span in the ORIGINAL context of context token t, None for
    [CLS], question and [SEP] tokens, as `postprocess.Window` expects. `start_position` and
    `end_position` are the token positions (inclusive) of the first answer, (0, 0) ([CLS]) when the
    example has no answer or the answer is not wholly inside this window."""

    example_id: str
    input_ids: tuple[int, ...]
    token_type_ids: tuple[int, ...]
    offsets: tuple[Span | None, ...]
    start_position: int
    end_position: int

    @property
    def window(self) -> Window:
        return Window(self.example_id, self.offsets)


class RejectedExample(ValueError):
    """An example that makes no features. `reason` is a short key to count it under
    (`Examples.reject`); the message adds the example's id and what was wrong."""

    def __init__(self, example_id: str, reason: str, detail: str = ""):
        super().__init__(f"example {example_id!r}: {reason}" + (f" ({detail})" if detail else ""))
        self.example_id, self.reason = example_id, reason


def _problem(example: QAExample) -> tuple[str, str] | None:
    """(reason, detail) of `reject_reason`."""
    if not example.question.strip():
        return "empty_question", "the question is blank"
    if not example.context.strip():
        return "empty_context", "the context is blank"
    for text, start in example.answers:
        if not text.strip():
            return "empty_answer", f"a blank answer at {start}"
        if not 0 <= start <= len(example.context) - len(text) or not example.context.startswith(text, start):
            found = example.context[max(start, 0) : max(start, 0) + len(text)]
            return "answer_start_mismatch", f"{text!r} at {start}, where the context has {found!r}"
    return None


def reject_reason(example: QAExample) -> str | None:
    """Why `example` cannot be used, None when it can: "empty_question" or "empty_context"
    (nothing but whitespace), "empty_answer" (an answer of whitespace only), or
    "answer_start_mismatch" (an answer's start does not point at its text:
    context[start:start+len(text)] != text). Every answer is checked, not only the first.
    `qa_windows` raises RejectedExample for these, and for what only the tokenizer finds:
    "empty_question" or "empty_context" for a text without a single piece, "unaligned_context"."""
    problem = _problem(example)
    return problem[0] if problem else None


# --- Pieces with their spans in the original text --------------------------------------------------

_WORD = re.compile(r"\S+")
# A unit: (normalised text, start, end): the normalised text that original[start:end] became.
Unit = tuple[str, int, int]


def _collapse_whitespace(text: str) -> list[Unit]:
    """The units of `" ".join(text.split())`: a whitespace run between words becomes one " " unit."""
    units: list[Unit] = []
    for word in _WORD.finditer(text):  # \S is exactly `not str.isspace()`, what str.split() splits at
        start, end = word.span()
        if units:
            units.append((" ", units[-1][2], start))
        units.extend((text[i], i, i + 1) for i in range(start, end))
    return units


def _replace_pairs(units: list[Unit], pair: str, replacement: str) -> list[Unit]:
    """str.replace(pair, replacement) for a two-character pair over one-character units."""
    if pair not in "".join(c for c, _, _ in units):
        return units
    out: list[Unit] = []
    k = 0
    while k < len(units):
        if k + 1 < len(units) and units[k][0] + units[k + 1][0] == pair:
            out.append((replacement, units[k][1], units[k + 1][2]))
            k += 2
        else:
            out.append(units[k])
            k += 1
    return out


def _strip_accents(units: list[Unit]) -> list[Unit]:
    """NFKD without combining marks, unit by unit: the same as on the whole string, since canonical
    reordering only moves combining marks, which all go. A dropped mark widens the span of the
    characters it followed, so that an accented letter's span covers its accent in the original."""
    out: list[Unit] = []
    for c, start, end in units:
        if c.isascii():
            out.append((c, start, end))
            continue
        kept = [d for d in unicodedata.normalize("NFKD", c) if not unicodedata.combining(d)]
        out.extend((d, start, end) for d in kept)
        if not kept:
            k = len(out) - 1
            while k >= 0 and out[k][2] == start and out[k][0] != " ":
                out[k] = (out[k][0], out[k][1], end)
                k -= 1
    return out


def _compose(units: list[Unit]) -> list[Unit]:
    """NFKC, by clusters: a combining mark (unless after a space) and any character that NFKC would
    combine with the cluster before it join that cluster, so that each cluster's NFKC is its share
    of the whole string's (the caller checks it)."""
    clusters: list[Unit] = []
    nfkc = functools.partial(unicodedata.normalize, "NFKC")
    for c, start, end in units:
        if clusters and not c.isascii():
            prev, prev_start, _ = clusters[-1]
            # a mark (or what decomposes into one first: "ﾞ") can reorder with the marks before it
            mark = unicodedata.combining(unicodedata.normalize("NFKD", c)[0])
            if (mark and prev != " ") or nfkc(prev + c) != nfkc(prev) + nfkc(c):
                clusters[-1] = (prev + c, prev_start, end)
                continue
        clusters.append((c, start, end))
    return [(d, start, end) for text, start, end in clusters for d in nfkc(text)]


def _normalize_with_spans(tokenizer: PairTokenizer, text: str) -> tuple[str, list[Span]] | None:
    """`tokenizer.normalize(text)` and, for each of its characters, the span of `text` it came from;
    None when the spans cannot be made to match it."""
    units = _replace_pairs(_replace_pairs(_collapse_whitespace(text), "``", '"'), "''", '"')
    if not text.isascii():
        units = _compose(units) if tokenizer.keep_accents else _strip_accents(units)
    ours = "".join(c for c, _, _ in units)
    if tokenizer.lowercase:
        lowered = ours.lower()
        if len(lowered) == len(units):  # every unit is one character here
            units = [(d, start, end) for d, (_, start, end) in zip(lowered, units)]
        else:  # a character whose lower case is longer: "İ", which NFKC keeps
            units = [(d, start, end) for c, start, end in units for d in c.lower()]
        ours = "".join(c for c, _, _ in units)
    normalized = tokenizer.normalize(text)
    # Lower-cased one character at a time, a word-final capital sigma becomes σ, not ς.
    if ours.replace("ς", "σ") != normalized.replace("ς", "σ"):
        return None
    return normalized, [(start, end) for _, start, end in units]


@functools.lru_cache(maxsize=4096)
def _blank(tokenizer: PairTokenizer, c: str) -> bool:
    """Whether SentencePiece's own normaliser makes `c` whitespace or nothing (a zero-width space,
    a byte-order mark, a control character)."""
    return tokenizer.sp.normalize(c) == ""


@functools.lru_cache(maxsize=32)  # a dataset's questions on one context come in a row
def piece_spans(tokenizer: PairTokenizer, text: str) -> tuple[tuple[int, ...], tuple[Span, ...]] | None:
    """(`tokenizer.pieces(text)`, each piece's (start, end) span in `text` itself, un-normalised).

    A span leaves out the space that a piece's "▁" stands for and anything else SentencePiece
    treats as whitespace or drops at the piece's edges; a piece of "▁" alone gets the empty span
    where the next word starts. A span covers whole original characters: the pieces of one
    character (the "f" and "i" of "ﬁ") each get that character's span, and a letter's span takes
    in a combining accent that normalisation dropped. Starts and ends never decrease. None when
    the text's normalisation cannot be traced character by character (not expected; see
    `_normalize_with_spans`)."""
    aligned = _normalize_with_spans(tokenizer, text)
    if aligned is None:
        return None
    normalized, origins = aligned
    encoded = tokenizer.sp.encode(normalized, out_type="offset_mapping")  # character offsets for a str
    spans = []
    for begin, end in encoded["offsets"]:
        next_char = end
        while begin < end and _blank(tokenizer, normalized[begin]):
            begin += 1
        while end > begin and _blank(tokenizer, normalized[end - 1]):
            end -= 1
        if begin < end:
            spans.append((origins[begin][0], origins[end - 1][1]))
        else:
            at = origins[next_char][0] if next_char < len(origins) else len(text)
            spans.append((at, at))
    return tuple(encoded["ids"]), tuple(spans)


# --- Windows ---------------------------------------------------------------------------------------


def window_starts(n_pieces: int, max_window: int, doc_stride: int) -> list[int]:
    """The first context piece of each window: 0, then `doc_stride` further (at most a whole window)
    until a window of `max_window` pieces reaches the last piece (run_squad's doc_spans)."""
    starts = [0]
    while starts[-1] + max_window < n_pieces:
        starts.append(starts[-1] + min(doc_stride, max_window))
    return starts


def _answer_pieces(spans: Sequence[Span], text: str, start: int) -> tuple[int, int]:
    """The first and last context piece (inclusive) of the answer `text` at character `start`,
    whitespace at its ends left out: the last piece starting at or before it, the first ending at or
    after its end, as transformers finds them (so an answer inside a piece gets the whole piece)."""
    end = start + len(text.rstrip())
    start += len(text) - len(text.lstrip())
    first = max(bisect.bisect_right([s for s, _ in spans], start) - 1, 0)
    last = min(bisect.bisect_left([e for _, e in spans], end), len(spans) - 1)
    return first, max(first, last)


def qa_windows(
    tokenizer: PairTokenizer,
    example: QAExample,
    max_seq_length: int = 384,
    max_query_length: int = 64,
    doc_stride: int = 128,
) -> list[QAFeature]:
    """The features of one example, one per window, as ALBERT's run_squad makes them: the question's
    first `max_query_length` pieces, then windows of at most max_seq_length - len(question) - 3
    context pieces whose starts are `doc_stride` pieces apart (the original's meaning: the distance
    between windows, not transformers' overlap), until one reaches the context's end.

    Raises RejectedExample for a row that cannot be used (see `reject_reason`) and ValueError for
    lengths that leave no room for the context."""
    if doc_stride < 1 or max_query_length < 1:
        raise ValueError(f"doc_stride ({doc_stride}) and max_query_length ({max_query_length}) must be >= 1")
    if (problem := _problem(example)) is not None:
        raise RejectedExample(example.id, *problem)
    question = tokenizer.pieces(example.question)[:max_query_length]
    if not question:
        raise RejectedExample(example.id, "empty_question", "no piece after normalisation")
    context = piece_spans(tokenizer, example.context)
    if context is None:
        raise RejectedExample(example.id, "unaligned_context", "normalisation could not be traced per character")
    ids, spans = context
    if not ids:
        raise RejectedExample(example.id, "empty_context", "no piece after normalisation")
    max_window = max_seq_length - len(question) - 3
    if max_window < 1:
        raise ValueError(f"max_seq_length {max_seq_length} leaves no room for a {len(question)}-piece question")

    answer = _answer_pieces(spans, *example.answers[0]) if example.answers else None
    head = (tokenizer.cls_id, *question, tokenizer.sep_id)
    features = []
    for first in window_starts(len(ids), max_window, doc_stride):
        last = min(first + max_window, len(ids))  # exclusive
        target = (0, 0)
        if answer is not None and first <= answer[0] and answer[1] < last:
            target = (len(head) + answer[0] - first, len(head) + answer[1] - first)
        features.append(
            QAFeature(
                example_id=example.id,
                input_ids=(*head, *ids[first:last], tokenizer.sep_id),
                token_type_ids=(0,) * len(head) + (1,) * (last - first + 1),
                offsets=(None,) * len(head) + spans[first:last] + (None,),
                start_position=target[0],
                end_position=target[1],
            )
        )
    return features


__all__ = ["QAExample", "QAFeature", "RejectedExample", "piece_spans", "qa_windows", "reject_reason", "window_starts"]
