"""Entity-level precision, recall and F1 and token accuracy with the semantics of the CoNLL shared
tasks' `conlleval` script, for token classification (named entities, chunks).

A tag is `PREFIX-TYPE` (split at its first "-") or `O`. An entity starts at a `B-`, or at an `I-`
whose type differs from the previous tag's (so an `I-` after `O` or after another type opens one:
IOB1, where `B-` only separates two adjacent entities of one type, reads as written); it ends
before a `B-`, an `O`, a change of type or a sentence's end. An entity is correct when gold and
prediction start it at the same token with the same type and end it at the same token. IOBES is
read as IOB2 (`S-` as `B-`, `E-` as `I-`): the script itself has no rule for `S-`, so two adjacent
single-token entities of one type would count as one there. Scores are percentages, as the script
prints them; a score with nothing to divide by is 0. Accuracy counts tokens whose whole tag
matches, sentence breaks excluded."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

_IOBES_AS_IOB2 = {"S": "B", "E": "I"}
_OUTSIDE = ("O", "")


def split_tag(tag: str) -> tuple[str, str]:
    """("B", "PER") for "B-PER", ("O", "") for "O"; IOBES prefixes as IOB2's."""
    prefix, _, kind = tag.partition("-")
    return _IOBES_AS_IOB2.get(prefix, prefix), kind


def _ends(prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    """An entity ended between the previous token and this one."""
    (prev_tag, prev_type), (tag, kind) = prev, cur
    return (prev_tag in ("B", "I") and tag in ("B", "O")) or (prev_tag != "O" and prev_type != kind)


def _starts(prev: tuple[str, str], cur: tuple[str, str]) -> bool:
    """An entity started at this token."""
    (prev_tag, prev_type), (tag, kind) = prev, cur
    return tag == "B" or (prev_tag == "O" and tag == "I") or (tag != "O" and prev_type != kind)


@dataclass
class ConllCounts:
    """The script's counters: entities in the gold tags, in the predictions, and correct ones (per
    type too), and tokens with their correct tags."""

    gold: Counter = field(default_factory=Counter)
    predicted: Counter = field(default_factory=Counter)
    correct: Counter = field(default_factory=Counter)
    tokens: int = 0
    correct_tags: int = 0


def _aligned(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> Iterator[tuple[str, str] | None]:
    """(gold tag, predicted tag) per token, None at each sentence's end."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, predicted)):
        if len(gold_tags) != len(pred_tags):
            raise ValueError(f"sentence {index}: {len(gold_tags)} gold tags but {len(pred_tags)} predicted")
        yield from zip(gold_tags, pred_tags)
        yield None


def count_entities(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> ConllCounts:
    """The counters over sentences of tags, gold and predicted aligned token by token; a sentence
    break closes every entity (it reads as an `O` that is not a token)."""
    counts = ConllCounts()
    last_gold = last_pred = _OUTSIDE
    in_correct = False  # gold and prediction started the current entity together, and agree so far
    for pair in _aligned(gold, predicted):
        g, p = (split_tag(pair[0]), split_tag(pair[1])) if pair is not None else (_OUTSIDE, _OUTSIDE)
        gold_ends, pred_ends = _ends(last_gold, g), _ends(last_pred, p)
        if in_correct:
            if gold_ends and pred_ends and last_gold[1] == last_pred[1]:
                counts.correct[last_gold[1]] += 1
                in_correct = False
            elif gold_ends != pred_ends or g[1] != p[1]:
                in_correct = False
        gold_starts, pred_starts = _starts(last_gold, g), _starts(last_pred, p)
        in_correct = in_correct or (gold_starts and pred_starts and g[1] == p[1])
        if gold_starts:
            counts.gold[g[1]] += 1
        if pred_starts:
            counts.predicted[p[1]] += 1
        if pair is not None:
            counts.tokens += 1
            counts.correct_tags += pair[0] == pair[1]  # the whole tag, as written (S-PER is not B-PER)
        last_gold, last_pred = g, p
    return counts


def chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """One sentence's entities as count_entities counts them: (type, first token, the token after
    its last). Its tags are all `O` or PREFIX-TYPE, or none is (parts of speech: no entity)."""
    found, start, last = [], None, _OUTSIDE
    for i, cur in enumerate([*map(split_tag, tags), _OUTSIDE]):  # the sentence's end closes the last
        if start is not None and _ends(last, cur):
            found.append((last[1], start, i))
            start = None
        if _starts(last, cur):
            start = i
        last = cur
    return found


def _prf(correct: int, gold: int, predicted: int) -> dict[str, float]:
    precision = 100.0 * correct / predicted if predicted else 0.0
    recall = 100.0 * correct / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def conll_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict:
    """Overall precision, recall, f1 and accuracy (percentages), the counts, and `per_type`: each
    entity type's precision, recall, f1 and counts."""
    counts = count_entities(gold, predicted)
    correct, found_gold, found_pred = (sum(c.values()) for c in (counts.correct, counts.gold, counts.predicted))
    types = sorted(set(counts.gold) | set(counts.predicted))
    return {
        **_prf(correct, found_gold, found_pred),
        "accuracy": 100.0 * counts.correct_tags / counts.tokens if counts.tokens else 0.0,
        "tokens": counts.tokens,
        "gold_entities": found_gold,
        "predicted_entities": found_pred,
        "correct_entities": correct,
        "per_type": {
            kind: {
                **_prf(counts.correct[kind], counts.gold[kind], counts.predicted[kind]),
                "gold": counts.gold[kind],
                "predicted": counts.predicted[kind],
                "correct": counts.correct[kind],
            }
            for kind in types
        },
    }


def reported_scores(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> dict[str, float]:
    """The overall scores the family reports (conll_scores' precision, recall, f1 and accuracy)."""
    result = conll_scores(gold, predicted)
    return {k: float(result[k]) for k in ("precision", "recall", "f1", "accuracy")}


def predictions_conll(sentences: Iterable[tuple[Sequence[str], Sequence[str] | None, Sequence[str]]]) -> str:
    """predictions.conll, conlleval's input: `word gold predicted` a line (`word predicted` for a
    sentence without gold tags), a blank line after each sentence; `sentences` of (words, gold, tags)."""
    lines = []
    for words, gold, tags in sentences:
        if gold is None:
            lines += [f"{w} {p}\n" for w, p in zip(words, tags)]
        else:
            lines += [f"{w} {g} {p}\n" for w, g, p in zip(words, gold, tags)]
        lines.append("\n")
    return "".join(lines)
