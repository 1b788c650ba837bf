"""SQuAD v1.1 and v2.0 scores with the semantics of the official `evaluate-v2.0.py`: answer
normalisation, exact match and token F1 (the best over the gold answers), the HasAns/NoAns split,
the no-answer threshold and the best-threshold search. v1.1 is the same with no unanswerable
questions."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower case, drop ASCII punctuation (`string.punctuation` only: "…" and "—" stay), drop the
    articles a/an/the as whole words, collapse whitespace; in this order, as the official script."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> float:
    """1.0 when both normalise to the same string, else 0.0."""
    return float(normalize_answer(gold) == normalize_answer(prediction))


def token_f1(gold: str, prediction: str) -> float:
    """F1 of the bags of normalised whitespace tokens, in [0, 1]."""
    gold_tokens = normalize_answer(gold).split()
    predicted_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        # An empty answer means "no answer": it matches only another empty answer.
        return float(gold_tokens == predicted_tokens)
    same = sum((Counter(gold_tokens) & Counter(predicted_tokens)).values())
    if same == 0:
        return 0.0
    precision = same / len(predicted_tokens)
    recall = same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def scoring_answers(answers: Sequence[str]) -> list[str]:
    """The answers a prediction is scored against: those not empty after normalisation, or [""]
    when there are none (the question is then scored as unanswerable: only "" is right)."""
    return [a for a in answers if normalize_answer(a)] or [""]


def question_scores(answers: Sequence[str], prediction: str) -> tuple[float, float]:
    """(exact, f1) of one prediction, each the maximum over the question's gold answers."""
    targets = scoring_answers(answers)
    return max(exact_match(t, prediction) for t in targets), max(token_f1(t, prediction) for t in targets)


def read_squad_golds(dataset: Mapping) -> dict[str, list[str]]:
    """Question id -> gold answer texts from a parsed official SQuAD file (`{"data": [{"paragraphs":
    [{"qas": [{"id", "answers": [{"text"}], "is_impossible"}]}]}]}`); [] for an unanswerable one."""
    golds: dict[str, list[str]] = {}
    for article in dataset["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["id"] in golds:
                    raise ValueError(f"question id {qa['id']!r} appears twice in the SQuAD file")
                impossible = qa.get("is_impossible", False)
                golds[qa["id"]] = [] if impossible else [a["text"] for a in qa["answers"]]
    return golds


def _percent(scores: Mapping[str, float], ids: Sequence[str]) -> float:
    return 100.0 * sum(scores[q] for q in ids) / len(ids)


def _best_threshold(
    answers: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    has_answer: Mapping[str, bool],
) -> tuple[float, float]:
    """(best score in percent, its threshold): start from "no answer" for every question, then answer
    them one by one in increasing na_prob order (a stable sort, so ties keep na_probs' order, and
    each question is a candidate on its own, as in the official script); a threshold is kept only
    when it strictly improves the score, and stays 0.0 when nothing beats answering none."""
    current = sum(1 for q in has_answer if not has_answer[q])
    best, best_threshold = current, 0.0
    for qid in sorted((q for q in na_probs if q in scores), key=na_probs.__getitem__):
        # An unanswerable question loses its point when answered with any non-empty string, even
        # one that normalises to "" (the official script tests the raw prediction here).
        current += scores[qid] if has_answer[qid] else (-1.0 if answers[qid] else 0.0)
        if current > best:
            best, best_threshold = current, na_probs[qid]
    return 100.0 * best / len(scores), float(best_threshold)


def squad_scores(
    golds: Mapping[str, Sequence[str]],
    predictions: Mapping[str, str],
    na_probs: Mapping[str, float] | None = None,
    threshold: float = 1.0,
) -> dict[str, float | int]:
    """The official evaluate-v2.0.py output for `golds` (question id -> gold answer texts, [] when
    unanswerable, as `read_squad_golds` gives), `predictions` (question id -> answer text, "" for no
    answer) and optionally `na_probs` (question id -> no-answer probability or odds).

    Returns `exact`, `f1` (percent), `total`; `HasAns_exact`, `HasAns_f1`, `HasAns_total` when some
    question has gold answers and the `NoAns_` three when some has none; with `na_probs`,
    `best_exact`, `best_exact_thresh`, `best_f1`, `best_f1_thresh`; and `missing`.

    - A question predicted no answer when its na_prob > `threshold` scores 1 if it is unanswerable,
      else 0. Without `na_probs` every na_prob is 0.0, as in the official script.
    - HasAns/NoAns split on whether the gold list is empty before normalisation (the official
      `make_qid_to_has_ans`); scoring uses `scoring_answers`, so a question whose gold answers all
      normalise to "" is in HasAns yet scored against [""].
    - A question without a prediction scores 0, as in the official v1.1 script, and is counted in
      `missing` (the v2 script leaves it out of the scores, and its HasAns/NoAns split then fails;
      an unanswerable question earns nothing by being skipped). The best-threshold search reads
      it as predicted "".
    - Predictions and na_probs for ids not in `golds` are ignored; `na_probs` must cover `golds`.
    """
    if not golds:
        raise ValueError("no questions to score")
    if na_probs is not None and (lacking := [q for q in golds if q not in na_probs]):
        raise ValueError(f"na_probs lacks {len(lacking)} question(s), e.g. {lacking[:5]}")
    answers = {qid: predictions.get(qid, "") for qid in golds}
    has_answer = {qid: bool(texts) for qid, texts in golds.items()}
    exact_raw, f1_raw = {}, {}
    for qid, texts in golds.items():
        exact_raw[qid], f1_raw[qid] = question_scores(texts, answers[qid])

    probs = na_probs if na_probs is not None else dict.fromkeys(golds, 0.0)
    no_answer = {qid: probs[qid] > threshold for qid in golds}
    exact = {q: float(not has_answer[q]) if no_answer[q] else s for q, s in exact_raw.items()}
    f1 = {q: float(not has_answer[q]) if no_answer[q] else s for q, s in f1_raw.items()}
    for qid in golds:
        if qid not in predictions:
            exact[qid] = f1[qid] = 0.0

    result: dict[str, float | int] = {}
    ids = list(golds)
    splits = [
        ("", ids),
        ("HasAns_", [q for q in ids if has_answer[q]]),
        ("NoAns_", [q for q in ids if not has_answer[q]]),
    ]
    for prefix, split in splits:
        if split:
            result[f"{prefix}exact"] = _percent(exact, split)
            result[f"{prefix}f1"] = _percent(f1, split)
            result[f"{prefix}total"] = len(split)
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(answers, exact_raw, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(answers, f1_raw, na_probs, has_answer)
    result["missing"] = sum(1 for q in golds if q not in predictions)
    return result


__all__ = [
    "exact_match",
    "normalize_answer",
    "question_scores",
    "read_squad_golds",
    "scoring_answers",
    "squad_scores",
    "token_f1",
]
