"""Multiple-choice inputs, read into questions with every question used or counted under a
rejection reason:
- SWAG's csv (columns sent1, sent2, ending0..N, label): context sent1, question sent2;
- RACE's json files (article, questions, options, answers as letters), a file or a folder of them;
- jsonl or parquet rows with finetune.context_column (optional), finetune.question_column, a list
  in finetune.choices_column and finetune.label_column: the right choice's index, or its letter.
A file's questions all have its most common number of choices (the model scores a fixed number per
batch); the others are rejected as `choice_count`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ....config import FinetuneSection
from ....errors import BadInput, MissingInput
from ....storage import filesystem
from ...tables import Accounted, read_table, seeded_sample, split_by_group

SWAG_COLUMNS = ("sent1", "sent2", "ending0")


@dataclass
class Questions(Accounted):
    """One split's usable questions and the account of its source."""

    source: str
    contexts: list[str] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    choices: list[list[str]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    """Each question's id: RACE's `{article id}-{index}`, a row's `id` (SWAG: `fold-ind`), else `row N`."""
    places: list[str] = field(default_factory=list)
    read: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejection_examples: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.questions)

    def add(self, context: str, question: str, choices: list[str], label: int, qid: str, place: str) -> None:
        self.contexts.append(context)
        self.questions.append(question)
        self.choices.append(choices)
        self.labels.append(label)
        self.ids.append(qid)
        self.places.append(place)

    def select(self, indices: list[int]) -> Questions:
        out = Questions(self.source)
        for i in indices:
            out.add(self.contexts[i], self.questions[i], self.choices[i], self.labels[i], self.ids[i], self.places[i])
        return out


def choice_index(label: Any, count: int) -> int | None:
    """The right choice's index from an index (int or digits) or a letter (A = 0); None if neither
    or out of range."""
    if isinstance(label, bool):
        return None
    if isinstance(label, float) and label.is_integer():
        label = int(label)
    if isinstance(label, str):
        text = label.strip()
        if re.fullmatch(r"[A-Za-z]", text):
            label = ord(text.upper()) - ord("A")
        elif re.fullmatch(r"\d+", text):
            label = int(text)
    return label if isinstance(label, int) and 0 <= label < count else None


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def add_question(out: Questions, context: Any, question: Any, choices: Any, label: Any, qid: Any, place: str) -> None:
    """One question, or its rejection: no choices or empty ones, or a label that names none."""
    out.read += 1
    if not isinstance(choices, list | tuple) or len(choices) < 2:
        out.reject(place, "too_few_choices")
    elif any(not _text(c) for c in choices):
        out.reject(place, "empty_choice")
    elif label is None or _text(label) == "":
        out.reject(place, "missing_label")
    elif (index := choice_index(label, len(choices))) is None:
        out.reject(place, "label_not_a_choice")
    elif not _text(question) and not _text(context):
        out.reject(place, "empty_question")
    else:
        out.add(_text(context), _text(question), [_text(c) for c in choices], index, _text(qid) or place, place)


def read_race(path: str) -> Questions:
    """RACE's json: a file, or a folder of them (read in name order); each holds an article and its
    questions, options and answers."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise MissingInput(f"{path}: no such file or folder")
    files = sorted(fs.find(p)) if fs.isdir(p) else [p]
    out = Questions(path)
    for name in files:
        try:
            with fs.open(name, "rb") as f:
                doc = json.loads(f.read().decode("utf-8", errors="replace"))
        except json.JSONDecodeError as e:
            raise BadInput(f"{name}: not RACE json: {e}") from None
        questions, options, answers = (doc.get(k) or [] for k in ("questions", "options", "answers"))
        article = _text(doc.get("id")) or name.rsplit("/", 1)[-1]
        for i in range(max(len(questions), len(options), len(answers))):
            question, choices, answer = (xs[i] if i < len(xs) else None for xs in (questions, options, answers))
            place = f"{name} question {i}"
            add_question(out, doc.get("article"), question, choices, answer, f"{article}-{i}", place)
    return out


def read_choice_table(path: str, cfg: FinetuneSection) -> Questions:
    table = read_table(path)
    out = Questions(path)
    rows = len(next(iter(table.values())))
    if all(c in table for c in SWAG_COLUMNS):  # SWAG: the endings in ending0..N, the question in sent2
        endings = sorted((c for c in table if re.fullmatch(r"ending\d+", c)), key=lambda c: int(c[6:]))
        for row in range(rows):
            choices = [table[c][row] for c in endings]
            add_question(
                out,
                table["sent1"][row],
                table["sent2"][row],
                choices,
                table.get("label", [None] * rows)[row],
                table.get("fold-ind", [None] * rows)[row],
                f"row {row}",
            )
        return out
    for column, key in (
        (cfg.question_column, "question_column"),
        (cfg.choices_column, "choices_column"),
        (cfg.label_column, "label_column"),
    ):
        if column not in table:
            raise BadInput(f"{path}: no column {column!r} (finetune.{key}); its columns are {', '.join(table)}")
    contexts, ids = (table.get(c, [None] * rows) for c in (cfg.context_column, "id"))
    for row in range(rows):
        add_question(
            out,
            contexts[row],
            table[cfg.question_column][row],
            table[cfg.choices_column][row],
            table[cfg.label_column][row],
            ids[row],
            f"row {row}",
        )
    return out


def read_questions(path: str, cfg: FinetuneSection) -> Questions:
    fs, p = filesystem(path)
    race = path.lower().removesuffix(".gz").endswith(".json") or (fs.exists(p) and fs.isdir(p))
    out = read_race(path) if race else read_choice_table(path, cfg)
    counts = Counter(len(c) for c in out.choices)
    if len(counts) > 1:  # one count per file: the model scores a fixed number of choices per batch
        common = counts.most_common(1)[0][0]
        kept = out.select([i for i, c in enumerate(out.choices) if len(c) == common])
        kept.read, kept.rejected, kept.rejection_examples = out.read, out.rejected, out.rejection_examples
        for i, c in enumerate(out.choices):
            if len(c) != common:
                kept.reject(f"{out.places[i]} ({len(c)} choices, not {common})", "choice_count")
        out = kept
    return out


def split_questions(questions: Questions, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded (train, eval) split; the questions of one context stay on one side (RACE's articles)."""
    return split_by_group([c or q for c, q in zip(questions.contexts, questions.questions)], fraction, seed)


def sample_questions(questions: Questions, k: int, seed: int) -> list[int]:
    """The indices, in order, of a seeded subsample of `k` questions."""
    return seeded_sample(questions.questions, k, seed)


__all__ = ["Questions", "choice_index", "read_questions", "sample_questions", "split_questions"]
