"""Token classification applied to unlabelled rows (predict, serve, the parity paths): a row is a
sentence's words (`tokens`, as CoNLL gives them) or a raw `text` split into words (split_words),
encoded and tagged as the evaluation encodes and tags its sentences (windows.py: long ones in
overlapping windows, no word cut off), the tags read into entities with conlleval's rules, as the
metrics count them (metrics.chunks)."""

from __future__ import annotations

import gzip
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ....errors import BadInput
from ...inference import Encoded, ModelUse
from .metrics import chunks, predictions_conll, reported_scores
from .reading import conll_blocks, text_lines
from .training import WORD_START
from .windows import encode_sentences, read_tags

WORD = re.compile(r"\w+(?:[-'’.]\w+)*|[^\w\s]")
"""A word of a raw text: letters, digits and underscores, joined by -, ' or . between two of them
(e-mail, don't, 3.5), or any other character that is not a space (punctuation, a symbol), alone:
CoNLL's tokens, mostly ("U.S." gives "U.S" and ".")."""
CONLL_SUFFIXES = (".conll", ".conll.gz")
"""The files read_file reads as CoNLL (the training reader's layout); any other is a table."""
PREDICTIONS_FILE = "predictions.conll"
"""What predict writes beside its parquet for CoNLL input: `word gold predicted` a line, as the
finetune stage's predictions.conll (conlleval's input), `word predicted` where a sentence has no gold."""
ENTITY = pa.struct(
    [
        ("type", pa.string()),
        ("start_word", pa.int64()),
        ("end_word", pa.int64()),
        ("text", pa.string()),
        ("start", pa.int64()),
        ("end", pa.int64()),
    ]
)


def split_words(text: str) -> list[tuple[str, int, int]]:
    """A raw text's words (WORD) with their characters in it: (word, start, end)."""
    return [(m.group(), m.start(), m.end()) for m in WORD.finditer(text)]


@dataclass(frozen=True)
class Tagging:
    """Encoded.extra: each row's words, their characters in a raw text (None for tokens), and where
    each word's tag is read: (feature, position) per word."""

    words: list[list[str]]
    spans: list[list[tuple[int, int]] | None]
    places: list[tuple[np.ndarray, np.ndarray]]


def row_words(row: Mapping[str, Any]) -> tuple[list[str], list[tuple[int, int]] | None]:
    """A checked row's words, and for a raw text each one's characters."""
    if row.get("tokens") is not None:
        return [str(token) for token in row["tokens"]], None
    found = split_words(row["text"])
    return [w for w, _, _ in found], [(start, end) for _, start, end in found]


def tokens_problem(tokens: Any) -> str | None:
    """Why a `tokens` value cannot be tagged, or None (a 1-d array of strings is a list of them)."""
    if isinstance(tokens, np.ndarray) and tokens.ndim == 1:
        tokens = tokens.tolist()
    if not isinstance(tokens, list | tuple) or not all(isinstance(t, str) for t in tokens):
        return "not_a_list_of_strings"
    if not tokens:
        return "empty_tokens"
    if not all(t.strip() for t in tokens):
        return "empty_token"
    return None


def gold_tags(row: Mapping[str, Any]) -> list[str] | None:
    """A predicted row's gold tags (its `label`, as JSON), or None where it has no tag per word."""
    gold = json.loads(row["label"]) if row.get("label") is not None else None
    return gold if isinstance(gold, list) and len(gold) == len(row["words"]) else None


def sort_key(value: Any) -> tuple[int, Any]:
    """Ids in their natural order: a CoNLL file's sentence numbers as numbers, others as strings."""
    text = str(value)
    return (0, int(text)) if text.isdigit() else (1, text)


class TokenClassificationInference:
    fields = ("tokens", "text")
    required = ()
    file_suffixes = (".conll",)
    output = {"words": pa.list_(pa.string()), "tags": pa.list_(pa.string()), "entities": pa.list_(ENTITY)}

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        """Reasons: tokens_and_text (both given), missing_text (neither), not_a_list_of_strings,
        empty_tokens, empty_token (a blank token), not_a_string (a text that is not one), empty_text
        (a text with no word)."""
        tokens, text = row.get("tokens"), row.get("text")
        if tokens is not None:
            return "tokens_and_text" if text is not None else tokens_problem(tokens)
        if text is None:
            return "missing_text"
        if not isinstance(text, str):
            return "not_a_string"
        return None if WORD.search(text) else "empty_text"

    def encode(self, rows: Sequence[Mapping[str, Any]], use: ModelUse) -> Encoded:
        start_rule = use.settings.get("word_start", WORD_START)
        if start_rule != WORD_START:
            raise BadInput(f"the model's record tags words at {start_rule!r}; this version reads {WORD_START!r}")
        split = [row_words(row) for row in rows]
        encoded = encode_sentences(use.tokenizer, [words for words, _ in split], use.max_seq_length)
        tagging = Tagging([words for words, _ in split], [spans for _, spans in split], encoded.places)
        return Encoded(encoded.features, encoded.owners, tagging)

    def predictions(
        self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: Any, use: ModelUse
    ) -> list[dict[str, Any]]:
        tagging: Tagging = encoded.extra
        names = use.label_names or [str(i) for i in range(outputs.shape[-1])]
        out = []
        for row, words, spans, tags in zip(
            rows, tagging.words, tagging.spans, read_tags(outputs, tagging.places, names)
        ):
            entities = []
            for kind, start, end in chunks(tags):
                entity = {"type": kind, "start_word": start, "end_word": end}
                if spans is None:
                    entity |= {"text": " ".join(words[start:end]), "start": None, "end": None}
                else:
                    begin, stop = spans[start][0], spans[end - 1][1]
                    entity |= {"text": row["text"][begin:stop], "start": begin, "end": stop}
                entities.append(entity)
            out.append({"words": words, "tags": tags, "entities": entities})
        return out

    def metrics(self, labels: Sequence[Any], predictions: Sequence[Mapping[str, Any]], use: ModelUse, section) -> dict:
        """conlleval's precision, recall, F1 and accuracy over the rows with gold tags, as the
        evaluation counts them (no eval_loss: predict keeps no logits); a row whose gold tags are not
        a list of one string per word is counted as `label_not_tags` instead."""
        gold, predicted, unusable = [], [], 0
        for label, prediction in zip(labels, predictions):
            tags = list(label) if isinstance(label, list | tuple) else None
            if tags is None or len(tags) != len(prediction["tags"]) or not all(isinstance(t, str) for t in tags):
                unusable += 1
                continue
            gold.append(tags)
            predicted.append(list(prediction["tags"]))
        scored = reported_scores(gold, predicted) if gold else {}
        return {"rows": len(gold), "label_not_tags": unusable, **scored}

    def files(self, results: Iterable[Mapping[str, Any]]) -> dict[str, str]:
        """predictions.conll of the predicted rows, in sentence order."""
        predicted = sorted((r for r in results if r.get("rejected") is None), key=lambda r: sort_key(r["id"]))
        return {PREDICTIONS_FILE: predictions_conll((r["words"], gold_tags(r), r["tags"]) for r in predicted)}

    def read_file(self, path: str, data: bytes) -> list[dict[str, Any]] | None:
        """A CoNLL file's sentences (`.conll`, gzipped or not, read as training reads them): rows of
        `id` (the sentence's number in the file, from 0), `tokens` (the first column) and, where
        each of its lines has one, `label` (the last column: the gold tags)."""
        name = path.lower()
        if not name.endswith(CONLL_SUFFIXES):
            return None
        if name.endswith(".gz"):
            data = gzip.decompress(data)
        rows = []
        for number, (_, lines) in enumerate(conll_blocks(text_lines(io.BytesIO(data)))):
            row: dict[str, Any] = {"id": number, "tokens": [c[0] for c in lines]}
            if all(len(c) > 1 for c in lines):
                row["label"] = [c[-1] for c in lines]
            rows.append(row)
        return rows


INFERENCE = TokenClassificationInference()

__all__ = ["ENTITY", "INFERENCE", "PREDICTIONS_FILE", "Tagging", "split_words"]
