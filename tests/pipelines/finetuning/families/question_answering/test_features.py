"""QA features on a real SentencePiece vocabulary: piece spans lead back to the original context's
characters (accents, ligatures, full-width forms, quotes, whitespace runs), ids equal the
fine-tuning tokenizer's and transformers', windows follow run_squad, and bad rows name their reason."""

import json
import random
import re
import shutil

import numpy as np
import pytest
from transformers import AlbertTokenizer

from pipelines.finetuning.families.question_answering.features import (
    QAExample,
    RejectedExample,
    piece_spans,
    qa_windows,
    reject_reason,
    window_starts,
)
from pipelines.finetuning.families.question_answering.postprocess import postprocess
from pipelines.finetuning.tables import bbc_news_examples
from pipelines.finetuning.tokenizer import PairTokenizer

CONTEXTS = {
    "Café Müller opened in 1975.": ["Café Müller", "1975"],
    "The ﬁnancial results of ＡＢＣ 123 were out.": ["ﬁnancial results", "ＡＢＣ 123", "ＡＢＣ"],
    "MiXeD CaSe words   with\n\nnew\tlines  and runs": ["MiXeD CaSe", "with\n\nnew\tlines", "runs"],
    "He said ``quoted words'' and left.": ["``quoted words''", "quoted words", "left"],
    "A decomposed Cafe\u0301 and naïve Straße.": ["Cafe\u0301", "naïve Straße"],
    "  Leading and trailing spaces.  ": ["Leading", "spaces"],
    "Bob\x01 met Alice\ufeff and Eve\u200b.": ["Bob", "Alice", "Eve", "Bob\x01 met"],
}
# Words that normalisation changes in every way it can: lengths, case, marks, widths, spaces.
WORDS = [
    "Café", "Cafe\u0301", "ﬁnancial", "ＡＢＣ", "ΟΔΟΣ", "İstanbul", "½", "x\u200by", "``", "''", "naïve", "Straße",
    "한국어", "ﾃｽﾄ", "ﾃﾞ", "😀", "a\u00adb", "BBC", "news", "1.5%", "(£600m)", "e\u0301\u0323", "A\u0300\u0323",
]  # fmt: skip
SEPARATORS = [" ", "  ", "\n", "\n\n", "\t", "\u00a0", "\u3000", " \u200b "]


def with_config(folder, tmp_path, name, **changes):
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**config, **changes}))
    return PairTokenizer(str(copy))


@pytest.fixture(scope="module")
def uncased(tiny_pretrained):
    return PairTokenizer(tiny_pretrained)


@pytest.fixture(scope="module", params=["uncased", "cased", "keep_accents"])
def tokenizer(request, tiny_pretrained, tmp_path_factory):
    """The tiny vocabulary as it is (lower case, accents removed), cased, and keeping accents (NFKC)."""
    if request.param == "uncased":
        return PairTokenizer(tiny_pretrained)
    changes = {"do_lower_case": False} if request.param == "cased" else {"keep_accents": True}
    return with_config(tiny_pretrained, tmp_path_factory.mktemp(request.param), request.param, **changes)


def example(context, answer=None, question="What is it?", qid="q"):
    return QAExample(qid, question, context, () if answer is None else ((answer, context.index(answer)),))


def extract(context, feature):
    return context[feature.offsets[feature.start_position][0] : feature.offsets[feature.end_position][1]]


def answered(features):
    found = [f for f in features if (f.start_position, f.end_position) != (0, 0)]
    assert len(found) == 1
    assert 0 < found[0].start_position <= found[0].end_position
    return found[0]


def fuzz_contexts(n=60, seed=0):
    rng = random.Random(seed)
    contexts = []
    for _ in range(n):
        words = rng.choices(WORDS, k=rng.randint(1, 12))
        text = "".join(w + rng.choice(SEPARATORS) for w in words)
        contexts.append((rng.choice(SEPARATORS) if rng.random() < 0.3 else "") + text.rstrip())
    return contexts


def test_pieces_equal_the_tokenizers_and_spans_are_ordered_and_inside(tokenizer):
    lines = [line for text in bbc_news_examples().texts[3::60] for line in text.splitlines() if line.strip()]
    for text in [*CONTEXTS, *fuzz_contexts(), *lines]:
        ids, spans = piece_spans(tokenizer, text)
        assert list(ids) == tokenizer.pieces(text), text
        assert len(spans) == len(ids)
        assert all(0 <= s <= e <= len(text) for s, e in spans), text
        assert [s for s, _ in spans] == sorted(s for s, _ in spans), text
        assert [e for _, e in spans] == sorted(e for _, e in spans), text


def test_spans_cover_the_text_with_only_whitespace_between(tokenizer):
    def blank(c):  # whitespace, or a character SentencePiece drops or reads as whitespace
        return tokenizer.sp.normalize(c) == ""

    for context in CONTEXTS:
        _, spans = piece_spans(tokenizer, context)
        text = [i for i, c in enumerate(context) if not blank(c)]
        assert spans[0][0] == text[0] and spans[-1][1] == text[-1] + 1
        for (_, prev_end), (start, _) in zip(spans, spans[1:]):
            assert all(blank(c) for c in context[prev_end:start]), (context, context[prev_end:start])
        assert set().union(*(range(s, e) for s, e in spans)) == set(text), context


def test_spans_equal_transformers_offsets_on_plain_text(tiny_pretrained, uncased):
    theirs = AlbertTokenizer.from_pretrained(tiny_pretrained)
    lines = [line for text in bbc_news_examples().texts[7::60] for line in text.splitlines() if line.strip()]
    for line in lines[:80]:
        ids, spans = piece_spans(uncased, line)
        ref = theirs(line, add_special_tokens=False, return_offsets_mapping=True)
        assert list(ids) == ref["input_ids"]
        # transformers gives a lone "▁" the next character; we give it nothing (nothing of it is in the text)
        lone = uncased.sp.piece_to_id("▁")
        assert [s for i, s in zip(ids, spans) if i != lone] == [
            tuple(o) for i, o in zip(ids, ref["offset_mapping"]) if i != lone
        ], line


def test_every_answer_is_extracted_exactly(tokenizer):
    for context, answers in CONTEXTS.items():
        for answer in answers:
            feature = answered(qa_windows(tokenizer, example(context, answer)))
            assert extract(context, feature) == answer, (context, answer)


def test_an_answer_with_whitespace_around_it_targets_its_text(uncased):
    context = "Café Müller opened in 1975."
    for answer in ("Müller ", " Müller", " in 1975"):
        ex = QAExample("q", "Who?", context, ((answer, context.index(answer)),))
        assert extract(context, answered(qa_windows(uncased, ex))) == answer.strip()


def test_every_word_of_odd_text_is_extracted_exactly(tokenizer):
    for context in fuzz_contexts():
        for match in re.finditer(r"\S+", context):
            if match.group().strip("\u200b"):
                ex = QAExample("q", "Which word?", context, ((match.group(), match.start()),))
                assert extract(context, answered(qa_windows(tokenizer, ex))) == match.group(), (context, match)


def test_a_short_pair_equals_transformers(tiny_pretrained, uncased):
    theirs = AlbertTokenizer.from_pretrained(tiny_pretrained)
    question, context = "Who runs ``Café Müller''?", "Café Müller  is run by the BBC's ﬁnancial team since 1975."
    (feature,) = qa_windows(uncased, example(context, "the BBC's ﬁnancial team", question))
    ref = theirs(question, context, return_token_type_ids=True)
    assert list(feature.input_ids) == ref["input_ids"]
    assert list(feature.token_type_ids) == ref["token_type_ids"]
    q = uncased.pieces(question)
    assert list(feature.input_ids) == [uncased.cls_id, *q, uncased.sep_id, *uncased.pieces(context), uncased.sep_id]
    assert feature.offsets[: len(q) + 2] == (None,) * (len(q) + 2) and feature.offsets[-1] is None
    assert None not in feature.offsets[len(q) + 2 : -1]
    assert extract(context, feature) == "the BBC's ﬁnancial team"


def test_long_context_windows_overlap_and_cover_it(uncased):
    context = " ".join(f"word{i} item{i % 7}" for i in range(80)) + " the final answer."
    ids = uncased.pieces(context)
    question = uncased.pieces("Where is it?")
    max_seq_length, stride = 48, 16
    max_window = max_seq_length - len(question) - 3
    features = qa_windows(uncased, example(context, "the final answer", "Where is it?"), max_seq_length, 64, stride)
    assert len(features) >= 3
    starts = window_starts(len(ids), max_window, stride)
    assert starts == [i * stride for i in range(len(features))]
    head = len(question) + 2
    windows = [f.input_ids[head:-1] for f in features]
    for first, window, feature in zip(starts, windows, features):
        assert list(window) == ids[first : first + max_window]
        assert len(feature.input_ids) == len(feature.token_type_ids) == len(feature.offsets) <= max_seq_length
    assert all(len(f.input_ids) == max_seq_length for f in features[:-1])
    assert all(
        list(a[-(max_window - stride) :]) == list(b[: max_window - stride]) for a, b in zip(windows, windows[1:])
    )
    assert starts[-1] + len(windows[-1]) == len(ids)  # with the overlaps, every piece is in some window
    assert answered(features) is features[-1]
    assert extract(context, features[-1]) == "the final answer"


def test_an_answer_is_a_target_in_every_window_that_holds_it(uncased):
    context = " ".join(f"w{i}" for i in range(120))
    _, spans = piece_spans(uncased, context)
    max_window = 40 - len(uncased.pieces("What is it?")) - 3
    for answer in ("w3 w4", "w40", "w61 w62 w63", "w119"):
        ex = example(context, answer)
        begin = ex.answers[0][1]
        first = next(i for i, (s, _) in enumerate(spans) if s == begin)
        last = next(i for i, (_, e) in enumerate(spans) if e == begin + len(answer))
        features = qa_windows(uncased, ex, max_seq_length=40, doc_stride=10)
        starts = window_starts(len(spans), max_window, 10)
        assert len(features) == len(starts)
        held = [s <= first and last < s + max_window for s in starts]
        assert any(held)
        for feature, inside in zip(features, held):
            if inside:
                assert extract(context, feature) == answer
            else:
                assert (feature.start_position, feature.end_position) == (0, 0)


def test_targets_lead_postprocess_back_to_the_answer(uncased):
    context = " ".join(f"w{i}" for i in range(60))
    ex = example(context, "w50 w51")
    features = qa_windows(uncased, ex, max_seq_length=32, doc_stride=8)
    width = max(len(f.input_ids) for f in features)
    start, end = np.zeros((len(features), width)), np.zeros((len(features), width))
    for row, f in enumerate(features):
        start[row, f.start_position] += 5.0
        end[row, f.end_position] += 5.0
    result = postprocess({"q": context}, [f.window for f in features], start, end)
    assert result.answers == {"q": "w50 w51"}


def test_unanswerable_examples_point_at_cls_in_every_window(uncased):
    context = " ".join(f"w{i}" for i in range(60))
    features = qa_windows(uncased, example(context), max_seq_length=32, doc_stride=8)
    assert len(features) >= 3
    assert {(f.start_position, f.end_position) for f in features} == {(0, 0)}


@pytest.mark.parametrize(
    ("question", "context", "answers", "reason"),
    [
        ("Who?", "Alice met Bob.", (("Bob", 0),), "answer_start_mismatch"),
        ("Who?", "Alice met Bob.", (("Alice", 0), ("Bob", 9)), "answer_start_mismatch"),
        ("Who?", "Alice met Bob.", (("Bob", -4),), "answer_start_mismatch"),
        ("Who?", "Alice met Bob.", (("Bob.", 12),), "answer_start_mismatch"),
        ("Who?", "Alice met Bob.", ((" ", 5),), "empty_answer"),
        (" \n", "Alice met Bob.", (("Bob", 10),), "empty_question"),
        ("Who?", "", (), "empty_context"),
        ("Who?", " \t\n", (), "empty_context"),
    ],
)
def test_bad_rows_name_their_reason(uncased, question, context, answers, reason):
    ex = QAExample("row7", question, context, answers)
    assert reject_reason(ex) == reason
    with pytest.raises(RejectedExample, match=f"'row7': {reason}") as raised:
        qa_windows(uncased, ex)
    assert raised.value.reason == reason


def test_text_without_a_piece_is_rejected(uncased):
    assert reject_reason(QAExample("q", "Who?", "\u200b\ufeff", ())) is None  # blank only to SentencePiece
    with pytest.raises(RejectedExample) as raised:
        qa_windows(uncased, QAExample("q", "Who?", "\u200b\ufeff", ()))
    assert raised.value.reason == "empty_context"
    with pytest.raises(RejectedExample) as raised:
        qa_windows(uncased, QAExample("q", "\ufeff", "Alice met Bob.", ()))
    assert raised.value.reason == "empty_question"


def test_the_question_is_truncated_and_the_window_must_fit(uncased):
    question = " ".join(f"q{i}" for i in range(100))
    (feature,) = qa_windows(uncased, example("Alice met Bob.", "Bob", question), max_query_length=10)
    assert list(feature.input_ids[1:11]) == uncased.pieces(question)[:10] and feature.input_ids[11] == uncased.sep_id
    assert feature.token_type_ids.count(0) == 12
    with pytest.raises(ValueError, match="no room"):
        qa_windows(uncased, example("Alice met Bob.", "Bob", question), max_seq_length=13, max_query_length=10)
