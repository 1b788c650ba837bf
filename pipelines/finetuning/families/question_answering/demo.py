"""A learnable extractive QA task from the embedded BBC News articles, with no download: cloze
questions, each a sentence of an article with one named span blanked out.

How an example is made, deterministically from the seed:
- The articles (title line, then one paragraph a line) are visited in a seeded order; from each, up
  to QUESTIONS_PER_ARTICLE sentences outside the title are drawn, each at least MIN_SENTENCE_CHARS
  long and holding a candidate span: a capitalised name of two words or more (a leading function
  word such as "The" or "But" is not part of it), or a number (`2003`, `76%`, `$1.13bn`, `464,000`).
- The question is the sentence with one drawn candidate replaced by `___`.
- The context is the sentence's paragraph, widened by its neighbours (next, then previous, in
  turn) while it stays within MAX_CONTEXT_CHARS; a slice of the article, so it keeps its text.
- The answer is the span's first occurrence in the context outside the question's sentence when
  there is one (the model must find the blanked name elsewhere), else the span in the sentence.
  An occurrence is the same text, not inside a longer word or number.
- `unanswerable_fraction` of the examples (rounded, seeded choice) get instead a paragraph window of
  another article that does not contain the answer text (case-insensitively), and no answer.

Ids are `bbc<article row>-<question>` (the article's row in `tables.bbc_news_examples`)."""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Iterator, Sequence

from ....storage import write_text
from ...tables import bbc_news_examples
from .features import QAExample
from .reading import flat_row

Span = tuple[int, int]

QUESTIONS_PER_ARTICLE = 2
MIN_SENTENCE_CHARS = 40
MAX_CONTEXT_CHARS = 1200
BLANK = "___"

_LINE = re.compile(r"\S(?:[^\n]*\S)?")
# A sentence ends at . ! or ? (and a closing quote) before whitespace and a capital, digit or quote.
_SENTENCE_BREAK = re.compile(r"[.!?][\"']?(\s+)(?=[\"'A-Z0-9])")
_WORD = r"[A-Z][a-z]+(?:[A-Z][a-z]+)*"  # Time, McDonald, TimeWarner
_NAME = re.compile(rf"(?<![\w'-]){_WORD}(?: {_WORD})+(?![\w'-])")
_NUMBER = re.compile(r"(?<![\w.,$£€-])[$£€]?\d+(?:[.,]\d+)*(?:%|bn|tn|m)?(?!\w|[.,]\d)")
_GLUED_BEFORE = re.compile(r"[\w$£€]")
_GLUED_AFTER = re.compile(r"\w|[.,]\d")
_FUNCTION_WORDS = frozenset({
    "A", "An", "And", "As", "At", "But", "By", "During", "For", "From", "He", "However", "If", "In", "It", "Its",
    "Last", "Many", "Meanwhile", "Mr", "Mrs", "Ms", "Next", "Now", "On", "One", "She", "So", "That", "The", "Their",
    "There", "These", "They", "This", "Those", "Under", "We", "What", "When", "While", "With",
})  # fmt: skip


def _occurrences(context: str, answer: str) -> Iterator[int]:
    """Where `answer` stands in `context` as a whole name or number, not inside a longer one."""
    at = context.find(answer)
    while at >= 0:
        end = at + len(answer)
        if not (at and _GLUED_BEFORE.match(context, at - 1)) and not _GLUED_AFTER.match(context, end):
            yield at
        at = context.find(answer, at + 1)


def _candidates(text: str, sentence: Span) -> list[Span]:
    """The names and numbers of `text[sentence]`, as spans of `text`, in order."""
    start, end = sentence
    found = []
    for m in _NAME.finditer(text, start, end):
        words = m.group().split(" ")
        lead = 0
        while lead < len(words) and words[lead] in _FUNCTION_WORDS:
            lead += 1
        if len(words) - lead >= 2:
            found.append((m.start() + sum(len(w) + 1 for w in words[:lead]), m.end()))
    found.extend(m.span() for m in _NUMBER.finditer(text, start, end))
    return sorted(found)


def _sentences(text: str, line: Span) -> list[Span]:
    spans, pos = [], line[0]
    for m in _SENTENCE_BREAK.finditer(text, *line):
        spans.append((pos, m.start(1)))
        pos = m.end(1)
    spans.append((pos, line[1]))
    return spans


def _window(lines: Sequence[Span], p: int) -> Span:
    """Line `p` widened by whole neighbouring lines, next then previous in turn, within MAX_CONTEXT_CHARS."""
    first, last = p, p
    grew = True
    while grew:
        grew = False
        for a, b in ((first, last + 1), (first - 1, last)):
            if a >= 0 and b < len(lines) and lines[b][1] - lines[a][0] <= MAX_CONTEXT_CHARS:
                first, last, grew = a, b, True
    return lines[first][0], lines[last][1]


def _article_questions(row: int, text: str, rng: random.Random) -> list[QAExample]:
    lines = [m.span() for m in _LINE.finditer(text)]
    drawn = [
        (p, sentence, candidates)
        for p in range(1, len(lines))  # line 0 is the title
        for sentence in _sentences(text, lines[p])
        if sentence[1] - sentence[0] >= MIN_SENTENCE_CHARS and (candidates := _candidates(text, sentence))
    ]
    rng.shuffle(drawn)
    out = []
    for k, (p, (s0, s1), candidates) in enumerate(drawn[:QUESTIONS_PER_ARTICLE]):
        a0, a1 = rng.choice(candidates)
        answer = text[a0:a1]
        c0, c1 = _window(lines, p)
        context = text[c0:c1]
        elsewhere = [i for i in _occurrences(context, answer) if not s0 - c0 <= i < s1 - c0]
        start = elsewhere[0] if elsewhere else a0 - c0
        question = text[s0:a0] + BLANK + text[a1:s1]
        out.append(QAExample(f"bbc{row:04d}-{k}", question, context, ((answer, start),)))
    return out


def _unanswerable(
    example: QAExample, own: int, articles: Sequence[tuple[int, str]], rng: random.Random
) -> QAExample | None:
    """`example`'s question with a paragraph window of another article that lacks its answer."""
    answer = example.answers[0][0].lower()
    for _ in range(20):
        row, text = articles[rng.randrange(len(articles))]
        lines = [m.span() for m in _LINE.finditer(text)]
        if row == own or len(lines) < 2:
            continue
        c0, c1 = _window(lines, rng.randrange(1, len(lines)))
        if answer not in text[c0:c1].lower():
            return QAExample(example.id, example.question, text[c0:c1])
    return None


def bbc_qa_examples(
    seed: int = 0, max_examples: int | None = None, unanswerable_fraction: float = 0.0
) -> list[QAExample]:
    """The cloze QA examples of the BBC News articles (the module docstring says how they are made):
    about two per article (4,400 from the 2,225 articles), the same list for the same arguments."""
    if not 0.0 <= unanswerable_fraction <= 1.0:
        raise ValueError(f"unanswerable_fraction must be in [0, 1], not {unanswerable_fraction}")
    if max_examples is not None and max_examples < 0:
        raise ValueError(f"max_examples must be >= 0 or None, not {max_examples}")
    source = bbc_news_examples()
    articles = list(zip(source.rows, source.texts))
    rng = random.Random(seed)
    order = list(range(len(articles)))
    rng.shuffle(order)
    examples: list[QAExample] = []
    owners: list[int] = []
    for i in order:
        if max_examples is not None and len(examples) >= max_examples:
            break
        row, text = articles[i]
        made = _article_questions(row, text, random.Random(f"{seed}:{row}"))
        examples.extend(made)
        owners.extend([row] * len(made))
    if max_examples is not None:
        examples, owners = examples[:max_examples], owners[:max_examples]
    chosen = sorted(rng.sample(range(len(examples)), round(unanswerable_fraction * len(examples))))
    for n in chosen:
        swapped = _unanswerable(examples[n], owners[n], articles, rng)
        if swapped is not None:
            examples[n] = swapped
    return examples


def write_jsonl(examples: Iterable[QAExample], path: str) -> None:
    """The examples as flat jsonl rows (reading.flat_row), local or s3://, written whole at once."""
    write_text(path, "".join(json.dumps(flat_row(e), ensure_ascii=False) + "\n" for e in examples))


__all__ = ["BLANK", "bbc_qa_examples", "write_jsonl"]
