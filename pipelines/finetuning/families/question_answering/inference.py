"""Question answering applied to unlabelled questions (predict, serve; pipelines/finetuning/inference.py):
a question and its context become the fine-tuning's doc-stride windows (features.qa_windows) and the
windows' logits one answer, found as the finetune stage's evaluation finds it (postprocess.postprocess
with the no-answer threshold it chose), with the settings the export records (config.json's
`albert_ray`: max_query_length, doc_stride, n_best_size, max_answer_length, null_threshold; a
folder without them gets finetune's defaults and answers every question, as for SQuAD v1.1).

Output per question: `answer` (a span of the context; "" for no answer, which only a SQuAD v2.0
model gives), `start` (the answer's first character in the context; null with ""), `score` (the best
span's start logit + end logit; null where no span is a candidate) and `null_score` (the lowest
[CLS] start + end logit over the question's windows). A v2.0 model answers "" where null_score -
score exceeds its null_threshold. Rejected rows: `missing_question`, `missing_context` (null or
absent), `not_a_string`, `empty_question`, `empty_context` (blank, or nothing the tokenizer keeps),
`unaligned_context` (a context whose normalisation cannot be traced back to its characters)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ....config import FinetuneSection
from ....errors import BadInput
from ...inference import Encoded, ModelUse
from .features import QAExample, RejectedExample, qa_windows
from .postprocess import postprocess
from .reading import squad_questions
from .training import reported

PREDICTIONS_FILE = "predictions.json"


@dataclass(frozen=True)
class AnswerSearch:
    """How an export's questions are windowed and answered: its record's settings, finetune's
    defaults for those it lacks; `null_threshold` None: every question is answered (SQuAD v1.1)."""

    max_query_length: int
    doc_stride: int
    n_best_size: int
    max_answer_length: int
    null_threshold: float | None

    @classmethod
    def of(cls, use: ModelUse) -> AnswerSearch:
        """The search `use` records; a malformed setting is BadInput naming it."""
        defaults = FinetuneSection()
        values: dict[str, Any] = {}
        for key in ("max_query_length", "doc_stride", "n_best_size", "max_answer_length"):
            value = use.settings.get(key, getattr(defaults, key))
            if type(value) is not int or value < 1:
                raise BadInput(f"the model's config.json albert_ray.{key} is {value!r}, not an integer >= 1")
            values[key] = value
        threshold = use.settings.get("null_threshold")
        if threshold is not None and (type(threshold) not in (int, float) or not np.isfinite(threshold)):
            raise BadInput(f"the model's config.json albert_ray.null_threshold is {threshold!r}, not a number")
        # a length set below the recorded one (predict.max_seq_length) leaves each window a context piece
        values["max_query_length"] = max(1, min(values["max_query_length"], use.max_seq_length - 4))
        return cls(**values, null_threshold=None if threshold is None else float(threshold))


class QuestionAnsweringInference:
    fields = ("question", "context", "id")
    required = ("question", "context")
    file_suffixes = (".json",)
    output = {"answer": pa.string(), "start": pa.int64(), "score": pa.float64(), "null_score": pa.float64()}

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        for name in ("question", "context"):
            value = row.get(name)
            if value is None:
                return f"missing_{name}"
            if not isinstance(value, str):
                return "not_a_string"
            if not value.strip():  # as features.reject_reason: nothing but whitespace
                return f"empty_{name}"
        return None

    def encode(self, rows: Sequence[Mapping[str, Any]], use: ModelUse) -> Encoded:
        """Each row's windows, in row order; a row is named by its index in `rows` (its own ids may
        repeat or be absent)."""
        search = AnswerSearch.of(use)
        encoded = Encoded(features=[], owners=[], extra=[])
        for i, row in enumerate(rows):
            example = QAExample(str(i), row["question"], row["context"])
            try:
                windows = qa_windows(
                    use.tokenizer, example, use.max_seq_length, search.max_query_length, search.doc_stride
                )
            except RejectedExample as e:
                encoded.rejected[i] = e.reason
                continue
            for window in windows:
                encoded.features.append((window.input_ids, window.token_type_ids))
                encoded.owners.append(i)
                encoded.extra.append(window.window)
        return encoded

    def predictions(
        self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: Any, use: ModelUse
    ) -> list[dict[str, Any]]:
        """`outputs`: [windows, tokens, 2] start and end logits (the family's training `scores`)."""
        search = AnswerSearch.of(use)
        kept = [str(i) for i in range(len(rows)) if i not in encoded.rejected]
        found = None
        if encoded.features:
            logits = np.asarray(outputs)
            found = postprocess(
                {k: rows[int(k)]["context"] for k in kept},
                encoded.extra,
                logits[..., 0],
                logits[..., 1],
                search.n_best_size,
                search.max_answer_length,
                version_2=search.null_threshold is not None,
                null_threshold=search.null_threshold or 0.0,
            )
        out = []
        for i in range(len(rows)):
            k = str(i)
            if found is None or i in encoded.rejected:
                out.append(dict.fromkeys(self.output))
                continue
            answer = {"answer": found.answers[k], "start": found.starts[k]}
            out.append(answer | {"score": found.scores[k], "null_score": found.null_scores[k]})
        return out

    def metrics(self, labels: Sequence[Any], predictions: Sequence[Mapping[str, Any]], use: ModelUse, section) -> dict:
        """The official script's scores (exact, f1 and their HasAns/NoAns splits, as the fine-tuning
        reports them) of the answers against each row's gold answer texts (a SQuAD file's, or
        predict.label_column's list of texts; [] for unanswerable); a label that is not a list of
        strings is counted as `label_not_answers` instead."""
        golds, answers, unusable = {}, {}, 0
        for i, (label, prediction) in enumerate(zip(labels, predictions)):
            if not isinstance(label, list) or not all(isinstance(t, str) for t in label):
                unusable += 1
                continue
            golds[str(i)], answers[str(i)] = label, prediction["answer"]
        return {"rows": len(golds), "label_not_answers": unusable, **(reported(golds, answers) if golds else {})}

    def read_file(self, path: str, data: bytes) -> list[dict[str, Any]] | None:
        """A SQuAD v1.1/v2.0 .json file's questions: rows of id, question, context and, where the file
        has them, the gold answer texts as `label` (reading.squad_questions); an id that appears
        twice is BadInput (predictions.json holds one answer per id)."""
        if not path.lower().removesuffix(".gz").endswith(".json"):
            return None
        if path.lower().endswith(".gz"):
            data = gzip.decompress(data)
        rows, seen = [], {}
        for where, row in squad_questions(path, data):
            if row["id"] is not None:
                if row["id"] in seen:
                    raise BadInput(f"{path} {where}: id {row['id']!r} is already {seen[row['id']]}'s")
                seen[row["id"]] = where
            rows.append(row)
        return rows

    def files(self, results: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        """SQuAD's predictions.json, {id: answer} of the predicted rows (a rejected one is left out:
        the official script counts it as a wrong answer), as the finetune stage writes it."""
        answers = {r["id"]: r["answer"] for r in results if r.get("rejected") is None}
        return {PREDICTIONS_FILE: json.dumps(answers, indent=1, sort_keys=True, ensure_ascii=False) + "\n"}


INFERENCE = QuestionAnsweringInference()

__all__ = ["INFERENCE", "PREDICTIONS_FILE", "AnswerSearch", "QuestionAnsweringInference"]
