"""Extractive QA post-processing: the start/end logits of a question's windows -> one answer span of
its context and the null-score difference, as transformers' `postprocess_qa_predictions` and
ALBERT's run_squad."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Window:
    """One tokenised window of a question and a slice of its context: row i of the logits belongs to
    the i-th window. `offsets[t]` is the (start, end) character span in the context that token t
    covers, None for question and special ([CLS], [SEP]) tokens; its length is the window's, and the
    logits past it (the padding to a batch's widest window) are never looked at, so that a window
    gets the same answer however it was batched."""

    example_id: str
    offsets: Sequence[tuple[int, int] | None]


@dataclass(frozen=True)
class QAPredictions:
    """What `postprocess` found for every question of `contexts`, in its order.

    `answers`: the answer text, a substring of the context, "" for no answer (predictions.json).
    `null_odds`: null score - best span score; above the threshold means no answer (null_odds.json,
    the official evaluator's --na-prob-file). `math.inf` for a question without a window (Python's
    json writes and reads it as Infinity).
    `unwindowed`: the questions that had no window: answered "" without looking at any logits.
    `starts`: the answer's first character in the context, None where the answer is "".
    `scores`: the best span's score (start logit + end logit), None where no span is a candidate.
    `null_scores`: the null score (the lowest [CLS] start + end logit over the windows), None for a
    question without a window."""

    answers: dict[str, str]
    null_odds: dict[str, float]
    unwindowed: tuple[str, ...]
    starts: dict[str, int | None]
    scores: dict[str, float | None]
    null_scores: dict[str, float | None]


def _window_best_span(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offsets: Sequence[tuple[int, int] | None],
    context: str,
    n_best_size: int,
    max_answer_length: int,
) -> tuple[float, int, str] | None:
    """(score, start character, text) of the best span whose start and end are among the window's
    `n_best_size` highest logits, both on context tokens, end >= start, at most `max_answer_length`
    tokens and not empty as text; None when there is no such span."""
    start_logits, end_logits = start_logits[: len(offsets)], end_logits[: len(offsets)]
    starts = np.argsort(-start_logits, kind="stable")[:n_best_size]  # ties: the lower token first
    ends = np.argsort(-end_logits, kind="stable")[:n_best_size]
    in_context = np.zeros(len(start_logits), dtype=bool)
    in_context[[t for t, span in enumerate(offsets) if span is not None]] = True
    lengths = ends[None, :] - starts[:, None] + 1  # (n_starts, n_ends)
    valid = in_context[starts][:, None] & in_context[ends][None, :] & (lengths >= 1) & (lengths <= max_answer_length)
    scores = start_logits[starts][:, None] + end_logits[ends][None, :]
    rows, cols = np.nonzero(valid)
    for k in np.argsort(-scores[rows, cols], kind="stable"):
        start, end = starts[rows[k]], ends[cols[k]]
        text = context[offsets[start][0] : offsets[end][1]]
        # transformers skips a candidate with empty text when choosing the best non-null answer
        if text:
            return float(scores[rows[k], cols[k]]), offsets[start][0], text
    return None


def _check_inputs(
    contexts: Mapping[str, str], windows: Sequence[Window], start_logits: np.ndarray, end_logits: np.ndarray
) -> None:
    if start_logits.ndim != 2 or start_logits.shape != end_logits.shape or len(start_logits) != len(windows):
        raise ValueError(
            f"start and end logits must both be [windows={len(windows)}, tokens]: "
            f"got {start_logits.shape} and {end_logits.shape}"
        )
    for i, window in enumerate(windows):
        if window.example_id not in contexts:
            raise ValueError(f"window {i} belongs to {window.example_id!r}, which has no context")
        if len(window.offsets) > start_logits.shape[1]:
            raise ValueError(f"window {i} has {len(window.offsets)} offsets for {start_logits.shape[1]} logits")
        n = len(contexts[window.example_id])
        if any(not 0 <= span[0] <= span[1] <= n for span in window.offsets if span is not None):
            raise ValueError(f"window {i} has offsets outside its context of {n} characters")


def postprocess(
    contexts: Mapping[str, str],
    windows: Sequence[Window],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2: bool = False,
    null_threshold: float = 0.0,
) -> QAPredictions:
    """One answer per question of `contexts` (question id -> its context) from the logits
    [len(windows), tokens] of its windows.

    In each window, every pair of its tokens' `n_best_size` highest start and end logits (the logits
    past its offsets, padding, are not ranked) is a candidate when both tokens are context tokens,
    end >= start and the span has at most `max_answer_length` tokens; it scores start_logit +
    end_logit and its text is context[offsets[start][0]:offsets[end][1]] (a candidate whose text is
    empty is skipped, as transformers does). The best candidate over all the question's windows wins
    (ties: the earlier window, then the higher-ranked start). With no candidate at all, the best span
    is "" scoring 0.0 (transformers' fallback, with "" for its "empty").
    The null score is the lowest start_logit[0] + end_logit[0] ([CLS]) over the windows; `null_odds`
    is always null score - best span score, and with `version_2` the answer is "" when that exceeds
    `null_threshold` (transformers' `null_score_diff_threshold`)."""
    if n_best_size < 1 or max_answer_length < 1:
        raise ValueError(f"n_best_size ({n_best_size}) and max_answer_length ({max_answer_length}) must be >= 1")
    start_logits = np.asarray(start_logits, dtype=np.float64)
    end_logits = np.asarray(end_logits, dtype=np.float64)
    _check_inputs(contexts, windows, start_logits, end_logits)

    best: dict[str, tuple[float, int, str]] = {}
    null_score: dict[str, float] = {}
    for i, window in enumerate(windows):
        qid = window.example_id
        null = float(start_logits[i, 0] + end_logits[i, 0])
        null_score[qid] = min(null_score.get(qid, null), null)
        span = _window_best_span(
            start_logits[i], end_logits[i], window.offsets, contexts[qid], n_best_size, max_answer_length
        )
        if span is not None and (qid not in best or span[0] > best[qid][0]):
            best[qid] = span

    answers, null_odds, starts = {}, {}, {}
    for qid in contexts:
        if qid not in null_score:
            answers[qid], null_odds[qid], starts[qid] = "", math.inf, None
            continue
        score, start, text = best.get(qid, (0.0, None, ""))
        null_odds[qid] = null_score[qid] - score
        answers[qid] = "" if version_2 and null_odds[qid] > null_threshold else text
        starts[qid] = start if answers[qid] else None
    return QAPredictions(
        answers,
        null_odds,
        tuple(q for q in contexts if q not in null_score),
        starts,
        {q: best[q][0] if q in best else None for q in contexts},
        {q: null_score.get(q) for q in contexts},
    )


__all__ = ["QAPredictions", "Window", "postprocess"]
