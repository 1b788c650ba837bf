"""Extractive QA examples from the official SQuAD JSON files (v1.1, v2.0) or flat jsonl/parquet rows
(transformers' layout), local or s3://, with every question either used or counted under a reason.

The two layouts, chosen by the file's extension (a `.gz` after it is decompressed):
- `.json`: SQuAD's `{"version", "data": [{"title", "paragraphs": [{"context", "qas": [{"id",
  "question", "answers": [{"text", "answer_start"}], "is_impossible"?}]}]}]}`. `is_impossible: true`
  marks an unanswerable question, whose `answers` must be empty (`plausible_answers` are ignored);
  any other question needs one answer or more.
- `.jsonl` (one object a line) or `.parquet` (one row each): `{"id", "question", "context",
  "answers": {"text": [...], "answer_start": [...]}}`; empty lists for an unanswerable question.

An id is a string (an integer is taken as its decimal string); `answer_start` is the answer's
character index in the context. Rejection reasons: `malformed_json` (a jsonl line), `missing_field`
(absent or null), `wrong_type`, `malformed_answers` (texts and starts of different lengths, answers on
an impossible question, none on a possible one), `empty_id`, `empty_question`, `empty_context`,
`empty_answer`, `answer_start_mismatch` (features.reject_reason), `duplicate_id` (an id an earlier
usable question has). A SQuAD article or paragraph whose questions cannot be reached (no
`paragraphs` or `qas` list) counts as one rejected row, named by its JSON path."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ....errors import BadInput, MissingInput
from ....storage import filesystem
from ...tables import Accounted, file_format
from .features import QAExample, reject_reason

FORMATS = {".jsonl": "jsonl", ".json": "squad", ".parquet": "parquet"}
FLAT_FIELDS = ("id", "question", "context", "answers")
MAX_NAMED = 5
"""Rejected rows named per reason; the rest are only counted."""


@dataclass
class QAReadResult(Accounted):
    """One file's usable questions, in file order, and what was left out and why."""

    source: str
    examples: list[QAExample] = field(default_factory=list)
    rejected: Counter = field(default_factory=Counter)
    rejection_examples: dict[str, list[str]] = field(default_factory=dict)
    """Reason -> up to MAX_NAMED `"<file> <where>: <what>"` lines; where is a JSON path such as
    `data[3].paragraphs[0].qas[5]`, a jsonl `line 7` (1-based) or a parquet `row 3` (0-based)."""
    version_2: bool = False
    """True when a usable question is unanswerable or the SQuAD file's version is 2.x."""

    @property
    def read(self) -> int:
        return len(self.examples) + sum(self.rejected.values())

    def __len__(self) -> int:
        return len(self.examples)

    def select(self, indices: list[int]) -> QAReadResult:
        """The questions at `indices`, in that order (the file's account stays with `self`)."""
        return QAReadResult(self.source, [self.examples[i] for i in indices], version_2=self.version_2)

    def name_rejection(self, place: str, reason: str, detail: str) -> None:
        named = self.rejection_examples.setdefault(reason, [])
        if len(named) < MAX_NAMED:
            named.append(f"{self.source} {place}: {detail}")

    def details(self) -> dict[str, Any]:
        return {"unanswerable": sum(not e.answers for e in self.examples), "version_2": self.version_2}


class _Bad(Exception):
    """A row that cannot be used: a reason to count it under and what was wrong."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def qa_format(path: str) -> str:
    return file_format(path, FORMATS, "QA file")


def _object(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise _Bad("wrong_type", f"{what} is {_kind(value)}, not an object")
    return value


def _value(value: Any, kind: type, label: str) -> Any:
    if value is None:
        raise _Bad("missing_field", f"no {label}")
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise _Bad("wrong_type", f"{label} is {_kind(value)}, not {_kind(kind())}")
    return value


def _field(row: dict, name: str, kind: type) -> Any:
    return _value(row.get(name), kind, repr(name))


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true/false"}
    return names.get(type(value), f"a {type(value).__name__}")


def _id(row: dict) -> str:
    value = row.get("id")
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    value = _value(value, str, "'id'")
    if not value.strip():
        raise _Bad("empty_id", "a blank 'id'")
    return value


def _answer(text: Any, start: Any, what: str) -> tuple[str, int]:
    return _value(text, str, f"{what}.text"), _value(start, int, f"{what}.answer_start")


def _squad_example(qa: Any, context: Any) -> QAExample:
    qa = _object(qa, "the question")
    qid = _id(qa)
    question = _field(qa, "question", str)
    context = _value(context, str, "'context' in its paragraph")
    impossible = qa.get("is_impossible")
    impossible = impossible is not None and _value(impossible, bool, "'is_impossible'")
    answers = []
    for n, answer in enumerate(_field(qa, "answers", list)):
        answer = _object(answer, f"answers[{n}]")
        answers.append(_answer(answer.get("text"), answer.get("answer_start"), f"answers[{n}]"))
    if impossible and answers:
        raise _Bad("malformed_answers", f"'is_impossible' is true but it has {len(answers)} answers")
    if not impossible and not answers:
        raise _Bad("malformed_answers", "no answers, and 'is_impossible' is not true")
    return QAExample(qid, question, context, tuple(answers))


def _flat_example(row: Any) -> QAExample:
    row = _object(row, "the row")
    qid = _id(row)
    question, context = _field(row, "question", str), _field(row, "context", str)
    answers = _field(row, "answers", dict)
    texts = _value(answers.get("text"), list, "'answers.text'")
    starts = _value(answers.get("answer_start"), list, "'answers.answer_start'")
    if len(texts) != len(starts):
        raise _Bad("malformed_answers", f"{len(texts)} answers.text but {len(starts)} answers.answer_start")
    return QAExample(
        qid, question, context, tuple(_answer(t, s, f"answers[{n}]") for n, (t, s) in enumerate(zip(texts, starts)))
    )


def _problem_detail(example: QAExample, reason: str) -> str:
    for text, start in example.answers:
        found = example.context[max(start, 0) : max(start, 0) + len(text)]
        if reason == "answer_start_mismatch" and (start < 0 or found != text):
            return f"answer {text!r} at {start}, where the context has {found!r}"
        if reason == "empty_answer" and not text.strip():
            return f"a blank answer at {start}"
    return reason.replace("_", " ")


def _collect(out: QAReadResult, rows: Iterable[tuple[str, Any]], make: Callable[[Any], QAExample]) -> None:
    """Turn each (where, raw) row into an example with `make`, or count it under its reason."""
    used: dict[str, str] = {}
    for where, raw in rows:
        try:
            if isinstance(raw, _Bad):
                raise raw
            example = make(raw)
            reason = reject_reason(example)
            if reason:
                raise _Bad(reason, _problem_detail(example, reason))
            if example.id in used:
                raise _Bad("duplicate_id", f"id {example.id!r} is already used at {used[example.id]}")
        except _Bad as bad:
            out.reject(_named(where, raw), bad.reason, bad.detail)
            continue
        used[example.id] = where
        out.examples.append(example)


def _named(where: str, raw: Any) -> str:
    """`where`, with the row's id when it has a usable one."""
    row = raw[0] if isinstance(raw, tuple) else raw
    qid = row.get("id") if isinstance(row, dict) else None
    return f"{where} (id {qid!r})" if isinstance(qid, (str, int)) and not isinstance(qid, bool) else where


def _squad_rows(document: dict) -> Iterator[tuple[str, Any]]:
    """(JSON path, (question, context) or _Bad) for every question of a SQuAD document; an article or
    paragraph whose questions cannot be listed is one _Bad row."""
    for i, article in enumerate(document["data"]):
        try:
            paragraphs = _field(_object(article, "the article"), "paragraphs", list)
        except _Bad as bad:
            yield f"data[{i}]", bad
            continue
        for j, paragraph in enumerate(paragraphs):
            where = f"data[{i}].paragraphs[{j}]"
            try:
                qas = _field(_object(paragraph, "the paragraph"), "qas", list)
            except _Bad as bad:
                yield where, bad
                continue
            for k, qa in enumerate(qas):
                yield f"{where}.qas[{k}]", (qa, paragraph.get("context"))


def squad_document(path: str, data: bytes) -> dict[str, Any]:
    """A SQuAD file's JSON (`data` its bytes); one that is not JSON or has no `data` list is BadInput
    naming `path`."""
    try:
        document = json.loads(data.decode("utf-8", errors="replace"))
    except json.JSONDecodeError as e:
        raise BadInput(f"{path}: not valid JSON ({e}); a .json QA file is SQuAD's layout") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise BadInput(
            f"{path}: not a SQuAD file: it has no top-level 'data' list of articles "
            '({"data": [{"paragraphs": [{"context", "qas": [...]}]}]}); flat rows belong in .jsonl or .parquet'
        )
    return document


def squad_questions(path: str, data: bytes) -> Iterator[tuple[str, dict[str, Any]]]:
    """(JSON path, {"id", "question", "context"}) of every question of a SQuAD file, for prediction:
    the question and its paragraph's context as they are (checked by whoever predicts), its id as a
    training file's (an integer as its decimal string) or None where it has no usable one; answers
    are not read for prediction: where a question has them as SQuAD gives them (`is_impossible: true`,
    or `answers` a list of objects whose `text` is a string), the row's `label` holds their texts ([]
    for an unanswerable one), which predict scores its answers against. A file `squad_document`
    refuses, or an article or paragraph whose questions cannot be listed, is BadInput naming it."""
    for where, row in _squad_rows(squad_document(path, data)):
        if isinstance(row, _Bad):
            raise BadInput(f"{path} {where}: {row.detail}; its questions cannot be listed")
        qa, context = row
        qa = qa if isinstance(qa, dict) else {}
        try:
            qid = _id(qa)
        except _Bad:
            qid = None
        row = {"id": qid, "question": qa.get("question"), "context": context}
        gold = _gold_texts(qa)
        if gold is not None:
            row["label"] = gold
        yield where, row


def _gold_texts(qa: dict[str, Any]) -> list[str] | None:
    """A question's gold answer texts ([] when it is unanswerable), or None when it has none usable."""
    if qa.get("is_impossible") is True:
        return []
    answers = qa.get("answers")
    if not isinstance(answers, list) or not answers:
        return None
    if not all(isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
        return None
    return [a["text"] for a in answers]


def _read_squad(out: QAReadResult, data: bytes) -> None:
    document = squad_document(out.source, data)
    out.version_2 = str(document.get("version", "")).lstrip("v").startswith("2")
    _collect(out, _squad_rows(document), lambda row: _squad_example(*row))


def _jsonl_rows(f) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(io.TextIOWrapper(f, encoding="utf-8", errors="replace"), start=1):
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as e:
            yield f"line {number}", _Bad("malformed_json", f"not JSON ({e})")


def _parquet_rows(f, path: str) -> Iterator[tuple[str, Any]]:
    table = pq.read_table(f)
    missing = [name for name in FLAT_FIELDS if name not in table.column_names]
    if missing:
        raise BadInput(
            f"{path}: no column {', '.join(map(repr, missing))}; QA rows need {', '.join(FLAT_FIELDS)} "
            f"and its columns are {', '.join(table.column_names)}"
        )
    for number, row in enumerate(table.select(list(FLAT_FIELDS)).to_pylist()):
        yield f"row {number}", row


def read_qa_file(path: str) -> QAReadResult:
    """Every question of a SQuAD .json file or a flat .jsonl/.parquet file (local or s3://), used or
    counted under its reason. A missing file, one that cannot be parsed (not JSON, no `data` list,
    a parquet without the QA columns) or one without a single question is an error naming it."""
    fmt = qa_format(path)
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise MissingInput(f"{path}: no such file")
    out = QAReadResult(path)
    try:
        with fs.open(p, "rb", compression="infer") as f:
            if fmt == "squad":
                _read_squad(out, f.read())
            else:
                rows = _jsonl_rows(f) if fmt == "jsonl" else _parquet_rows(f, path)
                _collect(out, rows, _flat_example)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError, EOFError) as e:
        raise BadInput(f"{path}: cannot be read as {fmt}: {e}") from e
    if not out.read:
        raise BadInput(f"{path}: the file has no questions")
    out.version_2 = out.version_2 or any(not e.answers for e in out.examples)
    return out


def flat_row(example: QAExample) -> dict[str, Any]:
    """An example as a flat row (.jsonl line or .parquet row), the layout `read_qa_file` reads."""
    return {
        "id": example.id,
        "question": example.question,
        "context": example.context,
        "answers": {"text": [t for t, _ in example.answers], "answer_start": [s for _, s in example.answers]},
    }


def golds_of(examples: Iterable[QAExample]) -> dict[str, list[str]]:
    """Question id -> its answer texts ([] when unanswerable), as metrics.read_squad_golds."""
    golds: dict[str, list[str]] = {}
    for example in examples:
        if example.id in golds:
            raise ValueError(f"question id {example.id!r} appears twice")
        golds[example.id] = [text for text, _ in example.answers]
    return golds


__all__ = [
    "FORMATS",
    "QAReadResult",
    "flat_row",
    "golds_of",
    "qa_format",
    "read_qa_file",
    "squad_document",
    "squad_questions",
]
