"""Token classification inputs, read into sentences (a token list and a tag per token) with every
sentence used or counted under a rejection reason: CoNLL files (a token and its columns per line, a
blank line between sentences, `-DOCSTART-` lines skipped) and jsonl or parquet rows holding a token
list and a tag list (transformers' datasets layout)."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from ....config import FinetuneSection
from ....errors import BadInput, MissingInput
from ....storage import filesystem
from ...labels import label_name
from ...tables import Accounted, file_format, read_table, seeded_sample, split_by_group

FORMATS = {".conll": "conll", ".txt": "conll", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}


@dataclass
class Sentences(Accounted):
    """One split's usable sentences, where they came from, and what was left out and why."""

    source: str
    tokens: list[list[str]] = field(default_factory=list)
    tags: list[list[str]] = field(default_factory=list)
    places: list[str] = field(default_factory=list)
    """Each sentence's place in its source, for errors: `line N` (CoNLL) or `row N` (tables)."""
    read: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejection_examples: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, tokens: list[str], tags: list[str], place: str) -> None:
        self.tokens.append(tokens)
        self.tags.append(tags)
        self.places.append(place)

    def select(self, indices: list[int]) -> Sentences:
        return Sentences(
            self.source,
            [self.tokens[i] for i in indices],
            [self.tags[i] for i in indices],
            [self.places[i] for i in indices],
        )


def conll_blocks(lines: Iterable[str]) -> Iterator[tuple[int, list[list[str]]]]:
    """A CoNLL file's sentences, from its lines: (the sentence's first line number, 1-based; each of
    its lines split into columns, the token first). Blank lines end a sentence; `-DOCSTART-` lines
    end one and belong to none."""
    start, block = 0, []
    for number, line in enumerate(lines, start=1):
        columns = line.split()
        if not columns or columns[0] == "-DOCSTART-":
            if block:
                yield start, block
            block = []
            continue
        if not block:
            start = number
        block.append(columns)
    if block:
        yield start, block


def text_lines(data: IO[bytes]) -> Iterable[str]:
    """A file's lines as every CoNLL reader here reads them: UTF-8, a byte that is not one replaced."""
    return io.TextIOWrapper(data, encoding="utf-8", errors="replace")


def read_conll(path: str, tag_column: int) -> Sentences:
    """A CoNLL file's sentences: the first column is the token, `tag_column` (0-based; -1 the last)
    its tag. As conlleval, every line has as many columns as the file's first: a sentence with a line
    that has another number (`column_count`) or lacks the tag's column (`missing_tag`) is rejected,
    and counted."""
    fs, p = filesystem(path)
    if not fs.exists(p):
        raise MissingInput(f"{path}: no such file")
    out = Sentences(path)
    expected = None
    with fs.open(p, "rb", compression="infer") as f:
        for start, lines in conll_blocks(text_lines(f)):
            out.read += 1
            expected = expected or len(lines[0])
            bad = None
            for columns in lines:
                if len(columns) != expected:
                    bad = bad or "column_count"
                elif not (len(columns) > 1 and -len(columns) <= tag_column < len(columns)):
                    bad = bad or "missing_tag"
            if bad:
                out.reject(f"line {start}", bad)
            else:
                out.add([c[0] for c in lines], [c[tag_column] for c in lines], f"line {start}")
    if not out.read:
        raise BadInput(f"{path}: no sentence (a token per line, a blank line between sentences)")
    return out


def read_token_table(path: str, tokens_column: str, tags_column: str) -> Sentences:
    """jsonl or parquet rows of a token list and a tag list of the same length."""
    table = read_table(path)
    for column, key in ((tokens_column, "finetune.tokens_column"), (tags_column, "finetune.tags_column")):
        if column not in table:
            raise BadInput(f"{path}: no column {column!r} ({key}); its columns are {', '.join(table)}")
    out = Sentences(path)
    for row, (tokens, tags) in enumerate(zip(table[tokens_column], table[tags_column])):
        out.read += 1
        if not isinstance(tokens, list | tuple) or not tokens:
            out.reject(f"row {row}", "empty_tokens")
        elif not isinstance(tags, list | tuple):
            out.reject(f"row {row}", "missing_tags")
        elif len(tags) != len(tokens):
            out.reject(f"row {row}", "length_mismatch")
        elif any(t is None or not str(t).strip() for t in tokens):
            out.reject(f"row {row}", "empty_token")
        else:
            out.add([str(t).strip() for t in tokens], [label_name(t) for t in tags], f"row {row}")
    return out


def read_sentences(path: str, cfg: FinetuneSection) -> Sentences:
    fmt = file_format(path, FORMATS, "token classification")
    if fmt == "conll":
        return read_conll(path, cfg.conll_tag_column)
    return read_token_table(path, cfg.tokens_column, cfg.tags_column)


def split_sentences(sentences: Sentences, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A seeded (train, eval) split of sentences; copies of one sentence stay on one side."""
    return split_by_group([tuple(tokens) for tokens in sentences.tokens], fraction, seed)


def sample_sentences(sentences: Sentences, k: int, seed: int) -> list[int]:
    """The indices, in order, of a seeded subsample of `k` sentences."""
    return seeded_sample([tuple(t) for t in sentences.tokens], k, seed)


__all__ = [
    "FORMATS",
    "Sentences",
    "conll_blocks",
    "read_conll",
    "read_sentences",
    "read_token_table",
    "sample_sentences",
    "split_sentences",
    "text_lines",
]
