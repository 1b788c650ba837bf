"""SQuAD scores against values worked out by hand from the official evaluate-v2.0.py's rules."""

import pytest

from pipelines.finetuning.families.question_answering.metrics import (
    exact_match,
    normalize_answer,
    question_scores,
    read_squad_golds,
    squad_scores,
    token_f1,
)


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("The Quick, Brown Fox!", "quick brown fox"),
        ("An apple a day", "apple day"),
        ("theatre and anagram", "theatre and anagram"),  # articles only as whole words
        ("Don't  stop\tme\nnow ", "dont stop me now"),
        ("A-B", "ab"),  # "-" goes first, so no article is left to remove
        ("A—B", "—b"),  # "—" is not in string.punctuation: it stays, and bounds the word "a"
        ("Wait…", "wait…"),
        ("«Hi»", "«hi»"),
        ("Café Naïve ÉCOLE", "café naïve école"),  # accents are kept, only lowered
        ("the", ""),
        ("", ""),
    ],
)
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_ignores_case_articles_and_punctuation():
    assert exact_match("the Eiffel Tower", "Eiffel tower.") == 1.0
    assert exact_match("Eiffel Tower", "Eiffel Towers") == 0.0
    assert exact_match("Café", "cafe") == 0.0


@pytest.mark.parametrize(
    ("gold", "prediction", "f1"),
    [
        ("Barack Obama", "Obama", 2 / 3),  # p 1, r 1/2: 2 * 1/2 / (3/2)
        ("red green blue", "green blue yellow purple", 4 / 7),  # p 2/4, r 2/3: (2/3) / (7/6)
        ("new new york", "new york york", 2 / 3),  # bags: one "new" and one "york" in common
        ("a cat", "the dog", 0.0),
        ("Café—Bar", "Café Bar", 0.0),  # one token "café—bar" against two
        ("", "", 1.0),  # no answer against no answer
        ("", "anything", 0.0),
        ("Paris", "", 0.0),
    ],
)
def test_token_f1(gold, prediction, f1):
    assert token_f1(gold, prediction) == pytest.approx(f1)


def test_several_gold_answers_take_the_maximum_of_each_score():
    golds = ["Denver Broncos", "Broncos", "the Denver Broncos"]
    assert question_scores(golds, "Broncos") == (1.0, 1.0)
    exact, f1 = question_scores(golds, "Denver")  # best F1 against "Denver Broncos": p 1, r 1/2
    assert exact == 0.0
    assert f1 == pytest.approx(2 / 3)


def test_no_answer_question_scores_100_for_empty_and_0_for_text():
    golds = {"q": []}
    assert squad_scores(golds, {"q": ""})["exact"] == 100.0
    assert squad_scores(golds, {"q": ""})["f1"] == 100.0
    assert squad_scores(golds, {"q": "Paris"})["exact"] == 0.0
    assert squad_scores(golds, {"q": "Paris"})["f1"] == 0.0


def test_gold_answers_all_empty_after_normalisation_are_scored_as_no_answer_but_split_as_has_answer():
    golds = {"q": ["The", "."]}
    assert question_scores(golds["q"], "") == (1.0, 1.0)
    assert question_scores(golds["q"], "a") == (1.0, 1.0)  # "a" normalises to "" as well
    assert question_scores(golds["q"], "x") == (0.0, 0.0)
    assert question_scores(["The", "Paris"], "") == (0.0, 0.0)  # "The" is dropped: only "Paris" counts
    scores = squad_scores(golds, {"q": ""})
    assert (scores["HasAns_total"], scores["HasAns_exact"], "NoAns_total" in scores) == (1, 100.0, False)


def test_missing_predictions_score_zero_and_are_reported():
    golds = {"has": ["Paris"], "none": [], "answered": ["Rome"]}
    scores = squad_scores(golds, {"answered": "Rome"})
    # "has" and "none" are missing: 0 each (v1.1's rule; "none" earns nothing by being skipped),
    # "answered" scores 1: 1 of 3
    assert scores["exact"] == pytest.approx(100 / 3)
    assert scores["total"] == 3
    assert scores["missing"] == 2
    assert (scores["HasAns_exact"], scores["NoAns_exact"]) == (50.0, 0.0)
    assert squad_scores(golds, {"answered": "Rome", "none": ""})["NoAns_exact"] == 100.0


def test_has_ans_and_no_ans_splits():
    golds = {"a": ["Saint Bernadette Soubirous"], "b": ["1990s"], "c": [], "d": []}
    predictions = {"a": "Bernadette", "b": "the 1990s", "c": "", "d": "a grotto"}
    scores = squad_scores(golds, predictions)
    # a: em 0, f1 p 1 r 1/3 -> 1/2; b: em 1, f1 1; c: 1, 1; d: 0, 0
    assert scores == pytest.approx(
        {
            "exact": 50.0,
            "f1": 62.5,
            "total": 4,
            "HasAns_exact": 50.0,
            "HasAns_f1": 75.0,
            "HasAns_total": 2,
            "NoAns_exact": 50.0,
            "NoAns_f1": 50.0,
            "NoAns_total": 2,
            "missing": 0,
        }
    )


def test_only_the_splits_that_have_questions_are_reported():
    assert set(squad_scores({"q": ["x"]}, {"q": "x"})) == {
        "exact",
        "f1",
        "total",
        "HasAns_exact",
        "HasAns_f1",
        "HasAns_total",
        "missing",
    }


def test_na_prob_above_the_threshold_means_no_answer():
    golds = {"a": ["x"], "b": []}
    predictions = {"a": "x", "b": "y"}  # raw: a right, b wrong
    na_probs = {"a": 0.2, "b": 0.9}
    assert squad_scores(golds, predictions, na_probs, threshold=0.5)["exact"] == 100.0  # b -> no answer
    assert squad_scores(golds, predictions, na_probs, threshold=0.1)["exact"] == 50.0  # a and b -> no answer
    assert squad_scores(golds, predictions, na_probs)["exact"] == 50.0  # default 1.0: raw scores
    assert squad_scores(golds, predictions, na_probs, threshold=0.9)["exact"] == 50.0  # equal is not above


def test_without_na_probs_every_na_prob_is_zero():
    golds = {"a": ["x"]}
    assert squad_scores(golds, {"a": "x"}, threshold=-0.5)["exact"] == 0.0
    assert "best_exact" not in squad_scores(golds, {"a": "x"})


# q   has answer  raw em  raw f1  prediction   na_prob
# q1  yes         1       1       right        0.1
# q2  no          0       0       "wrong"      0.3
# q3  yes         0       1/2     partial      0.4
# q4  yes         1       1       right        0.6
# q5  no          1       1       ""           0.8
# q6  no          0       0       "oops"       0.9
# Start with every question predicted "no answer": 3 unanswerable right. Answer them in na_prob order:
# em: q1 +1 -> 4 (best, 0.1), q2 -1 -> 3, q3 +0 -> 3, q4 +1 -> 4 (not better), q5 0, q6 -1 -> 3.
#     best_exact 4/6, threshold 0.1.
# f1: q1 +1 -> 4 (best, 0.1), q2 -1 -> 3, q3 +1/2 -> 3.5, q4 +1 -> 4.5 (best, 0.6), q5 0, q6 -1 -> 3.5.
#     best_f1 4.5/6 = 75, threshold 0.6.
BEST_GOLDS = {
    "q1": ["Lourdes"],
    "q2": [],
    "q3": ["Saint Bernadette Soubirous"],
    "q4": ["1858"],
    "q5": [],
    "q6": [],
}
BEST_PREDICTIONS = {"q1": "Lourdes", "q2": "wrong", "q3": "Bernadette", "q4": "1858", "q5": "", "q6": "oops"}
BEST_NA_PROBS = {"q1": 0.1, "q2": 0.3, "q3": 0.4, "q4": 0.6, "q5": 0.8, "q6": 0.9}


def test_best_threshold_search_by_hand():
    scores = squad_scores(BEST_GOLDS, BEST_PREDICTIONS, BEST_NA_PROBS)
    assert scores["exact"] == pytest.approx(50.0)  # threshold 1.0: raw em 1+0+0+1+1+0
    assert scores["f1"] == pytest.approx(3.5 / 6 * 100)
    assert scores["best_exact"] == pytest.approx(4 / 6 * 100)
    assert scores["best_exact_thresh"] == 0.1
    assert scores["best_f1"] == pytest.approx(75.0)
    assert scores["best_f1_thresh"] == 0.6
    # Without ties, the best F1 is the F1 scored at its threshold (q5 and q6 -> no answer).
    assert squad_scores(BEST_GOLDS, BEST_PREDICTIONS, BEST_NA_PROBS, threshold=0.6)["f1"] == pytest.approx(75.0)


def test_best_threshold_search_with_ties_follows_na_probs_order_as_the_official_code():
    golds = {"a": ["x"], "b": []}
    predictions = {"a": "x", "b": "y"}
    # Start 1 (b right). a first: +1 -> 2, best at 0.5 (though at 0.5 both are answered: 1 of 2).
    a_first = squad_scores(golds, predictions, {"a": 0.5, "b": 0.5})
    assert (a_first["best_exact"], a_first["best_exact_thresh"]) == (100.0, 0.5)
    # b first: -1 -> 0, then a +1 -> 1, never above the start: threshold stays 0.0.
    b_first = squad_scores(golds, predictions, {"b": 0.5, "a": 0.5})
    assert (b_first["best_exact"], b_first["best_exact_thresh"]) == (50.0, 0.0)


def test_best_threshold_stays_zero_when_answering_nothing_is_best():
    scores = squad_scores({"a": ["x"], "b": []}, {"a": "wrong", "b": ""}, {"a": 0.7, "b": 0.2})
    assert (scores["best_exact"], scores["best_exact_thresh"], scores["best_f1"]) == (50.0, 0.0, 50.0)


def test_best_threshold_counts_a_raw_non_empty_answer_to_an_unanswerable_question_as_wrong():
    golds = {"none": [], "has": ["x"]}
    # "the" normalises to "" (raw em 1), but the search tests the raw string: none -1 -> 0, has +1 -> 1.
    quirk = squad_scores(golds, {"none": "the", "has": "x"}, {"none": 0.5, "has": 0.7})
    assert (quirk["exact"], quirk["best_exact"], quirk["best_exact_thresh"]) == (100.0, 50.0, 0.0)
    empty = squad_scores(golds, {"none": "", "has": "x"}, {"none": 0.5, "has": 0.7})
    assert (empty["best_exact"], empty["best_exact_thresh"]) == (100.0, 0.7)


def test_na_probs_must_cover_every_question_and_extra_ids_are_ignored():
    with pytest.raises(ValueError, match="na_probs lacks 1"):
        squad_scores({"a": ["x"], "b": []}, {"a": "x", "b": ""}, {"a": 0.1})
    scores = squad_scores({"a": ["x"]}, {"a": "x", "stray": "y"}, {"a": 0.1, "stray": 0.0})
    assert (scores["exact"], scores["total"], scores["best_exact"]) == (100.0, 1, 100.0)
    with pytest.raises(ValueError, match="no questions"):
        squad_scores({}, {})


SQUAD_FILE = {
    "version": "v2.0",
    "data": [
        {
            "title": "Super_Bowl_50",
            "paragraphs": [
                {
                    "context": "The Denver Broncos defeated the Carolina Panthers 24–10 in 2016.",
                    "qas": [
                        {
                            "id": "w",
                            "question": "Who won?",
                            "answers": [{"text": "Denver Broncos", "answer_start": 4}, {"text": "Broncos"}],
                            "is_impossible": False,
                        },
                        {
                            "id": "s",
                            "question": "What was the score?",
                            "answers": [{"text": "24–10", "answer_start": 50}],
                            "is_impossible": False,
                        },
                        {
                            "id": "n",
                            "question": "Who sang?",
                            "answers": [],
                            "plausible_answers": [{"text": "Carolina Panthers"}],
                            "is_impossible": True,
                        },
                    ],
                }
            ],
        },
        {
            "title": "v1_style",
            "paragraphs": [{"context": "In 1858.", "qas": [{"id": "y", "answers": [{"text": "1858"}]}]}],
        },
    ],
}


def test_read_squad_golds():
    assert read_squad_golds(SQUAD_FILE) == {"w": ["Denver Broncos", "Broncos"], "s": ["24–10"], "n": [], "y": ["1858"]}
    duplicated = {"data": [{"paragraphs": [{"qas": [{"id": "a", "answers": []}, {"id": "a", "answers": []}]}]}]}
    with pytest.raises(ValueError, match="twice"):
        read_squad_golds(duplicated)


def test_hand_computed_reference_values():
    """Every expected number below is worked out by hand from the official rules, not by this module."""
    predictions = {"w": "the Denver Broncos.", "s": "24-10", "n": "Carolina", "y": "in 1858"}
    na_probs = {"w": -3.0, "s": 2.0, "n": 1.5, "y": 0.0}
    # w: "denver broncos" == gold 1: em 1, f1 1.
    # s: gold "24–10" keeps its en dash; "24-10" loses its hyphen -> "2410": em 0, f1 0.
    # n: unanswerable, answered "Carolina": em 0, f1 0.
    # y: "in 1858" vs "1858": em 0, f1 p 1/2 r 1 -> 2/3.
    # threshold 1.0: s (2.0) and n (1.5) -> no answer: s 0 (answerable), n 1 (unanswerable).
    # exact (1+0+1+0)/4 = 50; f1 (1+0+1+2/3)/4 = 2/3; HasAns em 1/3, f1 (1+0+2/3)/3 = 5/9; NoAns 1.
    # Search, start 1 (n): w (-3.0) +1 -> 2 (best -3.0); y (0.0) em +0 / f1 +2/3 -> f1 8/3 (best 0.0);
    # n (1.5) -1; s (2.0) +0. best_exact 2/4 at -3.0, best_f1 (8/3)/4 = 2/3 at 0.0.
    expected = {
        "exact": 50.0,
        "f1": 200 / 3,
        "total": 4,
        "HasAns_exact": 100 / 3,
        "HasAns_f1": 500 / 9,
        "HasAns_total": 3,
        "NoAns_exact": 100.0,
        "NoAns_f1": 100.0,
        "NoAns_total": 1,
        "best_exact": 50.0,
        "best_exact_thresh": -3.0,
        "best_f1": 200 / 3,
        "best_f1_thresh": 0.0,
        "missing": 0,
    }
    assert squad_scores(read_squad_golds(SQUAD_FILE), predictions, na_probs) == pytest.approx(expected)
