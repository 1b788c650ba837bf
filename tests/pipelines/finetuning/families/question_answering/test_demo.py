"""The BBC News cloze QA demo: a few thousand valid examples in seconds, the same for the same seed,
answers found outside the question's sentence when the context has them, the asked unanswerable
share, and a round trip through the flat jsonl layout."""

import time

import pytest

from pipelines.finetuning.families.question_answering.demo import BLANK, bbc_qa_examples, write_jsonl
from pipelines.finetuning.families.question_answering.features import reject_reason
from pipelines.finetuning.families.question_answering.reading import golds_of, read_qa_file

# Measured on the 2-core dev machine, the full set with the corpus read: 1.6 s idle, 5-7 s beside a running suite.
BUILD_SECONDS = 60


@pytest.fixture(scope="module")
def answerable():
    started = time.perf_counter()
    examples = bbc_qa_examples(seed=0)
    elapsed = time.perf_counter() - started
    assert elapsed < BUILD_SECONDS, f"building the demo set took {elapsed:.1f} s"
    return examples


@pytest.fixture(scope="module")
def mixed():
    return bbc_qa_examples(seed=0, unanswerable_fraction=0.1)


def whole_occurrences(context, text):
    """Where `text` stands in `context` with no letter, digit, _ or currency sign glued before it and
    no letter, digit, _ or decimal part after it."""
    found, at = [], context.find(text)
    while at >= 0:
        before, after = context[at - 1 : at] if at else "", context[at + len(text) : at + len(text) + 2]
        glued_before = before.isalnum() or before in ("_", "$", "£", "€")
        glued_after = after[:1].isalnum() or after[:1] == "_" or (after[:1] in (".", ",") and after[1:].isdigit())
        if not glued_before and not glued_after:
            found.append(at)
        at = context.find(text, at + 1)
    return found


def test_a_few_thousand_valid_cloze_examples(answerable):
    assert len(answerable) >= 4000
    assert len({e.id for e in answerable}) == len(answerable)
    for e in answerable:
        assert reject_reason(e) is None
        ((text, start),) = e.answers
        assert e.context[start : start + len(text)] == text
        assert e.question.count(BLANK) == 1


def test_the_answer_is_outside_the_question_sentence_when_the_context_has_it(answerable):
    outside = 0
    for e in answerable:
        ((text, start),) = e.answers
        sentence = e.question.replace(BLANK, text)
        s0 = e.context.find(sentence)
        assert s0 >= 0, e.id  # the question's sentence is in its context
        others = [i for i in whole_occurrences(e.context, text) if not s0 <= i < s0 + len(sentence)]
        if s0 <= start < s0 + len(sentence):
            assert others == [], e.id
        else:
            assert start == others[0], e.id
            outside += 1
    assert outside > 0.05 * len(answerable)


def test_same_seed_same_list_and_another_seed_another(answerable):
    assert bbc_qa_examples(seed=0, max_examples=300) == answerable[:300]
    assert bbc_qa_examples(seed=1, max_examples=300) != answerable[:300]


def test_the_unanswerable_share_pairs_a_question_with_a_context_lacking_its_answer(answerable, mixed):
    assert len(mixed) == len(answerable)
    unanswerable = [n for n, e in enumerate(mixed) if not e.answers]
    assert len(unanswerable) == round(0.1 * len(mixed))
    for n in unanswerable:
        e, original = mixed[n], answerable[n]
        assert (e.id, e.question) == (original.id, original.question)
        assert reject_reason(e) is None
        assert original.answers[0][0].lower() not in e.context.lower()
        assert e.context != original.context
    kept = [n for n in range(len(mixed)) if mixed[n].answers]
    assert all(mixed[n] == answerable[n] for n in kept)
    assert bbc_qa_examples(seed=0, max_examples=200, unanswerable_fraction=0.25) == bbc_qa_examples(
        seed=0, max_examples=200, unanswerable_fraction=0.25
    )
    with pytest.raises(ValueError, match="unanswerable_fraction"):
        bbc_qa_examples(unanswerable_fraction=1.5)


def test_round_trip_through_flat_jsonl(mixed, tmp_path):
    path = str(tmp_path / "bbc_qa.jsonl")
    write_jsonl(mixed, path)
    result = read_qa_file(path)
    assert result.examples == mixed
    assert result.rejected == {} and result.version_2
    assert golds_of(result.examples) == golds_of(mixed)
