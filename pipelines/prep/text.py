"""Raw document text to paragraphs and sentences, and ALBERT's text normalisation."""

from __future__ import annotations

import re
import unicodedata

import sentencex

# A line holding only spaces or tabs is blank too; a run of blank lines is one boundary.
_BLANK_LINE = re.compile(r"\n\s*\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def split_paragraphs(text: str) -> list[str]:
    """Paragraphs between blank lines, each with its whitespace runs (newlines too) as one space."""
    return [p for p in (" ".join(chunk.split()) for chunk in _BLANK_LINE.split(text)) if p]


def _segment(paragraph: str) -> list[str]:
    # sentencex: the fastest candidate by far with the second-best score on the hand-written
    # cases (bench/segmenters.py, docs/BENCHMARKS.md); its English rules are compiled in, no model.
    try:
        return sentencex.segment("en", paragraph)
    except UnicodeEncodeError:
        # Lone surrogates (from JSON escapes) cannot cross into Rust; they become U+FFFD, as
        # undecodable bytes do when a file is read.
        return sentencex.segment("en", _SURROGATE.sub("\ufffd", paragraph))


def split_sentences(text: str) -> list[str]:
    """Sentences of a document's raw text, in order, stripped; none crosses a paragraph boundary."""
    sentences = []
    for paragraph in split_paragraphs(text):
        # sentencex keeps the spaces after a sentence and can yield a whitespace-only piece.
        sentences.extend(s for s in (s.strip() for s in _segment(paragraph)) if s)
    return sentences


def normalize_text(text: str, lowercase: bool = True) -> str:
    """ALBERT's preprocess_text (remove_space, no accents): the string SentencePiece is given."""
    text = " ".join(text.split())
    text = text.replace("``", '"').replace("''", '"')
    # NFKD leaves ASCII unchanged and ASCII has no combining marks: most sentences skip the work.
    if not text.isascii():
        text = unicodedata.normalize("NFKD", text)
        text = "".join(c for c in text if not unicodedata.combining(c))
    if lowercase:
        text = text.lower()
    return text


__all__ = ["split_paragraphs", "split_sentences", "normalize_text"]
