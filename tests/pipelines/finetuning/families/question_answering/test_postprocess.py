"""QA post-processing on hand-made windows: the span rules, the null answer, and properties over
random logits checked for every question."""

import math
import re

import numpy as np
import pytest

from pipelines.finetuning.families.question_answering.postprocess import Window, postprocess

QUESTION_TOKENS = 3
LOW = -10.0


def word_spans(context):
    return [m.span() for m in re.finditer(r"\S+", context)]


def make_windows(qid, context, chunk, stride, seq_len=None):
    """[CLS] question [SEP] `chunk` context words [SEP] (padding up to seq_len), the first context
    word of window k being word k * stride, as a tokenizer with a document stride lays them out."""
    spans = word_spans(context)
    windows, first = [], 0
    while True:
        offsets = [None] * (QUESTION_TOKENS + 2) + spans[first : first + chunk] + [None]
        offsets += [None] * ((seq_len or 0) - len(offsets))
        windows.append(Window(qid, tuple(offsets)))
        if first + chunk >= len(spans):
            return windows
        first += stride


def token(word, first_word=0):
    """Index of context word `word` in a window whose first context word is `first_word`."""
    return QUESTION_TOKENS + 2 + word - first_word


def flat_logits(windows, seq_len):
    return np.full((len(windows), seq_len), LOW), np.full((len(windows), seq_len), LOW)


CONTEXT = " ".join(f"w{i}" for i in range(30))


def test_answer_only_in_the_last_of_several_windows():
    windows = make_windows("q", CONTEXT, chunk=10, stride=7)  # context words from 0, 7, 14, 21
    assert len(windows) == 4
    seq_len = QUESTION_TOKENS + 2 + 10 + 1
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(4, seq_len)), rng.normal(size=(4, seq_len))
    start[0, token(3)], end[0, token(4)] = 5.0, 5.0  # a weaker span in the first window
    start[3, token(26, 21)], end[3, token(27, 21)] = 10.0, 10.0
    result = postprocess({"q": CONTEXT}, windows, start, end)
    assert result.answers == {"q": "w26 w27"}
    start[0, token(3)], end[0, token(4)] = 10.0, 10.0  # a tie: the earlier window wins
    assert postprocess({"q": CONTEXT}, windows, start, end).answers == {"q": "w3 w4"}
    assert result.null_odds["q"] == pytest.approx((start[:, 0] + end[:, 0]).min() - 20.0)
    assert result.unwindowed == ()


def test_a_span_reaching_into_the_question_special_or_padding_tokens_is_never_chosen():
    seq_len = 20  # 16 tokens with offsets, then 4 of padding
    windows = make_windows("q", CONTEXT, chunk=10, stride=10, seq_len=None)[:1]
    start, end = flat_logits(windows, seq_len)
    start[0, 1], end[0, token(2)] = 20.0, 20.0  # starts in the question
    start[0, token(5)], end[0, 15] = 19.0, 19.0  # ends on the last [SEP]
    end[0, 18] = 19.5  # ends in the padding, past the offsets
    start[0, token(7)], end[0, token(8)] = 1.0, 1.0
    result = postprocess({"q": CONTEXT}, windows, start, end)
    # the best pair on context tokens only: (w5, w8) 19 + 1, before (w5, w5..w9) 19 - 10 and (w7, w8) 1 + 1
    assert result.answers == {"q": "w5 w6 w7 w8"}
    assert result.null_odds["q"] == pytest.approx(2 * LOW - 20.0)


def test_max_answer_length_is_respected():
    windows = make_windows("q", CONTEXT, chunk=10, stride=10)[:1]
    start, end = flat_logits(windows, 16)
    start[0, token(0)], end[0, token(5)] = 9.5, 9.0  # 6 tokens
    end[0, token(3)] = 4.0  # 4 tokens
    assert postprocess({"q": CONTEXT}, windows, start, end, max_answer_length=6).answers["q"] == "w0 w1 w2 w3 w4 w5"
    assert postprocess({"q": CONTEXT}, windows, start, end, max_answer_length=5).answers["q"] == "w0 w1 w2 w3"
    assert postprocess({"q": CONTEXT}, windows, start, end, max_answer_length=1).answers["q"] == "w0"


def test_an_end_before_its_start_is_never_chosen():
    windows = make_windows("q", CONTEXT, chunk=10, stride=10)[:1]
    start, end = flat_logits(windows, 16)
    start[0, token(6)], end[0, token(2)] = 9.0, 9.0  # 18, but backwards
    start[0, token(2)], end[0, token(3)] = 5.0, 4.0
    # (w2, w2) 5 + 9 = 14 beats (w2, w3) 9 and (w6, w6..) 9 - 10
    assert postprocess({"q": CONTEXT}, windows, start, end).answers["q"] == "w2"


def test_an_end_before_its_start_is_refused_even_where_both_tokens_cover_the_same_characters():
    # A normalising tokenizer can split one character ("ﬁ" -> "f", "i") into tokens with one span.
    context = "ﬁ x"
    window = Window("q", (None, (0, 1), (0, 1), (2, 3), None))
    start, end = np.full((1, 5), LOW), np.full((1, 5), LOW)
    start[0, 2], end[0, 1] = 9.0, 9.0  # backwards, but its text "ﬁ" would not be empty
    start[0, 3], end[0, 3] = 1.0, 1.0
    # (token 2, token 1) would score 18 as "ﬁ"; the best forward pair is (2, 3): 10
    assert postprocess({"q": context}, [window], start, end).answers["q"] == "ﬁ x"


def test_only_the_top_n_best_starts_and_ends_are_candidates():
    windows = make_windows("q", CONTEXT, chunk=10, stride=10)[:1]
    start, end = flat_logits(windows, 16)
    start[0, 1], end[0, 2] = 20.0, 20.0  # in the question: the only top-1 pair is invalid
    start[0, token(4)], end[0, token(4)] = 3.0, 3.0
    assert postprocess({"q": CONTEXT}, windows, start, end, n_best_size=2).answers["q"] == "w4"
    only_invalid = postprocess({"q": CONTEXT}, windows, start, end, n_best_size=1)
    assert only_invalid.answers["q"] == ""
    assert only_invalid.null_odds["q"] == 2 * LOW - 0.0  # no span: it scores 0.0


def null_case(cls_scores, span_score):
    """Two windows of one question whose [CLS] scores are `cls_scores` and best span `span_score`."""
    windows = make_windows("q", CONTEXT, chunk=16, stride=14)
    assert len(windows) == 2
    start, end = flat_logits(windows, 22)
    for w, cls in enumerate(cls_scores):
        start[w, 0], end[w, 0] = cls / 2, cls / 2
    start[1, token(20, 14)], end[1, token(21, 14)] = span_score / 2, span_score / 2
    return {"q": CONTEXT}, windows, start, end


def test_version_2_answers_nothing_when_the_null_score_wins_by_more_than_the_threshold():
    inputs = null_case(cls_scores=(12.0, 7.0), span_score=5.0)  # null = min(12, 7): odds 7 - 5 = 2
    assert postprocess(*inputs, version_2=True).null_odds["q"] == pytest.approx(2.0)
    assert postprocess(*inputs, version_2=True).answers["q"] == ""
    assert postprocess(*inputs, version_2=True, null_threshold=1.5).answers["q"] == ""
    assert postprocess(*inputs, version_2=True, null_threshold=2.0).answers["q"] == "w20 w21"  # not above
    assert postprocess(*inputs, version_2=True, null_threshold=3.0).answers["q"] == "w20 w21"
    assert postprocess(*inputs).answers["q"] == "w20 w21"  # v1 always answers


def test_the_null_score_is_the_lowest_over_the_windows():
    # max would give 12 - 5 > 0 and no answer; the min gives 2 - 5 = -3
    result = postprocess(*null_case(cls_scores=(12.0, 2.0), span_score=5.0), version_2=True)
    assert result.null_odds["q"] == pytest.approx(-3.0)
    assert result.answers["q"] == "w20 w21"


def test_a_question_without_a_window_is_answered_empty_and_named():
    windows = make_windows("a", CONTEXT, chunk=10, stride=10)[:1]
    start, end = flat_logits(windows, 16)
    start[0, token(1)], end[0, token(1)] = 5.0, 5.0
    result = postprocess({"b": "other", "a": CONTEXT, "c": "more"}, windows, start, end, version_2=True)
    assert result.answers == {"b": "", "a": "w1", "c": ""}
    assert (result.null_odds["b"], result.null_odds["c"]) == (math.inf, math.inf)
    assert result.unwindowed == ("b", "c")


def test_inconsistent_inputs_are_refused():
    windows = make_windows("q", CONTEXT, chunk=10, stride=10)[:1]
    start, end = flat_logits(windows, 16)
    with pytest.raises(ValueError, match="logits"):
        postprocess({"q": CONTEXT}, windows, start, end[:, :15])
    with pytest.raises(ValueError, match="no context"):
        postprocess({"other": CONTEXT}, windows, start, end)
    with pytest.raises(ValueError, match="offsets for 12 logits"):
        postprocess({"q": CONTEXT}, windows, start[:, :12], end[:, :12])
    with pytest.raises(ValueError, match="outside its context"):
        postprocess({"q": CONTEXT[:20]}, windows, start, end)


WORDS = ["alpha", "béta", "γάμμα", "—", "dash-ed", "x…", "a", "the", "«q»", "2016"]


def random_case(rng, n_questions):
    contexts, windows = {}, []
    for q in range(n_questions):
        words = rng.choice(WORDS, size=int(rng.integers(1, 40)))
        contexts[f"q{q}"] = "".join(f"{w}{' ' * int(rng.integers(1, 3))}" for w in words)
        windows += make_windows(f"q{q}", contexts[f"q{q}"], chunk=int(rng.integers(1, 12)), stride=5, seq_len=20)
    shape = (len(windows), 20)
    return contexts, windows, rng.normal(size=shape) * 3, rng.normal(size=shape) * 3


def reference(contexts, windows, start, end, n_best_size, max_answer_length):
    """The rules written as plain loops over every pair, as transformers' utils_qa does."""
    best, null = {}, {}
    for i, window in enumerate(windows):
        qid = window.example_id
        null[qid] = min(null.get(qid, math.inf), start[i, 0] + end[i, 0])
        top_starts = sorted(range(20), key=lambda t: -start[i, t])[:n_best_size]
        top_ends = sorted(range(20), key=lambda t: -end[i, t])[:n_best_size]
        for s in top_starts:
            for e in top_ends:
                offsets = window.offsets
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                text = contexts[qid][offsets[s][0] : offsets[e][1]]
                if text and start[i, s] + end[i, e] > best.get(qid, (-math.inf, ""))[0]:
                    best[qid] = (start[i, s] + end[i, e], text)
    return {q: best.get(q, (0.0, ""))[1] for q in contexts}, {q: null[q] - best.get(q, (0.0, ""))[0] for q in contexts}


@pytest.mark.parametrize("n_best_size", [1, 3, 20])
def test_matches_the_plain_loop_reference_on_random_logits(n_best_size):
    contexts, windows, start, end = random_case(np.random.default_rng(n_best_size), n_questions=25)
    result = postprocess(contexts, windows, start, end, n_best_size=n_best_size, max_answer_length=4)
    answers, null_odds = reference(contexts, windows, start, end, n_best_size, max_answer_length=4)
    assert result.answers == answers
    assert result.null_odds == pytest.approx(null_odds)


def test_every_answer_is_whole_context_tokens_of_one_window_on_random_logits():
    contexts, windows, start, end = random_case(np.random.default_rng(7), n_questions=40)
    for version_2 in (False, True):
        result = postprocess(contexts, windows, start, end, max_answer_length=5, version_2=version_2)
        for qid, answer in result.answers.items():
            # every span of at most 5 context tokens in one window of this question, and ""
            allowed = {""} | {
                contexts[qid][w.offsets[s][0] : w.offsets[e][1]]
                for w in windows
                if w.example_id == qid
                for s in range(20)
                for e in range(s, min(s + 5, 20))
                if w.offsets[s] is not None and w.offsets[e] is not None
            }
            assert answer in contexts[qid], qid
            assert answer in allowed, qid
            # where the answer starts, and the two scores whose difference is the null odds
            first = result.starts[qid]
            assert (first is None) == (answer == "") and contexts[qid][first or 0 :].startswith(answer), qid
            assert result.null_odds[qid] == result.null_scores[qid] - (result.scores[qid] or 0.0), qid


def test_the_answer_does_not_depend_on_the_padding_after_a_window():
    """A window's logits past its own tokens (padding to its batch's widest window, or zeros where
    batches are gathered) are no candidates, so they take none of the n_best_size places: a window
    batched with longer ones, or alone, gets the same answer and null odds."""
    windows = make_windows("q", CONTEXT, chunk=10, stride=10)[:1]  # 16 tokens
    start, end = flat_logits(windows, 16)
    start[0, token(4)], end[0, token(5)] = 3.0, 3.0
    alone = postprocess({"q": CONTEXT}, windows, start, end, n_best_size=2)
    padding = np.full((1, 8), 20.0)  # a padded position's logits may be anything
    padded = postprocess({"q": CONTEXT}, windows, np.hstack([start, padding]), np.hstack([end, padding]), n_best_size=2)
    assert alone.answers == padded.answers == {"q": "w4 w5"}
    assert padded.null_odds == alone.null_odds
