"""Entity scores against values worked out by hand from conlleval's rules. The official script
printed the same figures for each case (IOBES given to it as IOB2), and the same lines as
conll_scores on 300 random IOB1/IOB2 cases: a check run once while writing this, not shipped."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.finetuning.families.token_classification.metrics import (
    chunks,
    conll_scores,
    count_entities,
    split_tag,
)


def scores(gold, predicted):
    s = conll_scores(gold, predicted)
    counts = (s["tokens"], s["gold_entities"], s["predicted_entities"], s["correct_entities"])
    return counts, round(s["accuracy"], 2), round(s["precision"], 2), round(s["recall"], 2), round(s["f1"], 2)


def test_iob2_an_entity_is_correct_only_with_the_same_start_end_and_type():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG"]]  # LOC typed ORG; ORG one token too long
    assert scores(gold, pred) == ((6, 3, 3, 1), 66.67, 33.33, 33.33, 33.33)
    per_type = conll_scores(gold, pred)["per_type"]
    assert {k: (v["gold"], v["predicted"], v["correct"]) for k, v in per_type.items()} == {
        "LOC": (1, 0, 0),
        "ORG": (1, 2, 0),
        "PER": (1, 1, 1),
    }
    assert per_type["PER"]["f1"] == 100.0 and per_type["LOC"]["precision"] == 0.0 and per_type["ORG"]["recall"] == 0.0


def test_iob1_an_i_tag_without_b_opens_an_entity_and_b_splits_two_of_a_type():
    gold = [["I-PER", "I-PER", "B-PER", "O", "I-LOC"]]  # IOB1: PER, PER, LOC
    pred = [["B-PER", "I-PER", "I-PER", "O", "I-LOC"]]  # one PER over both, LOC
    assert scores(gold, pred) == ((5, 3, 2, 1), 60.0, 50.0, 33.33, 40.0)


def test_a_change_of_type_inside_i_tags_ends_one_entity_and_starts_another():
    assert scores([["B-PER", "I-PER", "I-PER"]], [["B-PER", "I-PER", "I-LOC"]]) == ((3, 1, 2, 0), 66.67, 0.0, 0.0, 0.0)


def test_a_sentence_break_ends_every_entity_and_the_last_entity_counts():
    split = ([["O", "B-PER"], ["I-PER", "O"]],) * 2  # the I-PER after the break is a second PER
    joined = ([["O", "B-PER", "I-PER", "O"]],) * 2
    assert scores(*split) == ((4, 2, 2, 2), 100.0, 100.0, 100.0, 100.0)
    assert scores(*joined) == ((4, 1, 1, 1), 100.0, 100.0, 100.0, 100.0)
    assert scores([["O", "B-LOC"]], [["O", "B-LOC"]]) == ((2, 1, 1, 1), 100.0, 100.0, 100.0, 100.0)


def test_iobes_is_read_as_iob2_and_accuracy_compares_the_tags_as_written():
    gold = [["S-PER", "S-PER", "B-LOC", "E-LOC", "O"]]  # PER, PER, LOC
    pred = [["S-PER", "B-PER", "E-PER", "E-LOC", "O"]]  # PER, PER (one token too long), LOC (a token late)
    # accuracy 3/5: S-PER and B-PER read alike as entity starts but are different tags
    assert scores(gold, pred) == ((5, 3, 3, 1), 60.0, 33.33, 33.33, 33.33)
    assert split_tag("S-PER") == split_tag("B-PER") == ("B", "PER")
    assert split_tag("E-LOC") == ("I", "LOC") and split_tag("O") == ("O", "")
    assert split_tag("B-MISC-X") == ("B", "MISC-X")  # split at the first "-", as the script does


def test_no_prediction_scores_zero_not_an_error():
    assert scores([["B-PER", "O"]], [["O", "O"]]) == ((2, 1, 0, 0), 50.0, 0.0, 0.0, 0.0)
    assert scores([], []) == ((0, 0, 0, 0), 0.0, 0.0, 0.0, 0.0)


def test_misaligned_input_names_the_sentence():
    with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
        conll_scores([["O"], ["O", "B-PER"]], [["O"], ["O"]])
    with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
        conll_scores([["O"], ["O"]], [["O"]])


def test_chunks_are_the_entities_the_scores_count():
    assert chunks(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [("PER", 0, 2), ("PER", 2, 3), ("LOC", 4, 5)]
    assert chunks(["S-PER", "S-PER", "B-LOC", "E-LOC"]) == [("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 4)]
    assert chunks(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    assert chunks(["NN", "VBZ", "O"]) == []  # tags without entity prefixes (parts of speech) mark none


TAG = st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "S-PER", "E-LOC"])


@given(sentences=st.lists(st.lists(st.tuples(TAG, TAG), max_size=12), max_size=4))
def test_an_entity_is_correct_exactly_when_gold_and_prediction_have_the_same_chunk(sentences):
    gold = [[g for g, _ in pairs] for pairs in sentences]
    predicted = [[p for _, p in pairs] for pairs in sentences]
    counts = count_entities(gold, predicted)
    assert counts.gold == Counter(kind for tags in gold for kind, _, _ in chunks(tags))
    assert counts.predicted == Counter(kind for tags in predicted for kind, _, _ in chunks(tags))
    same = Counter(kind for g, p in zip(gold, predicted) for kind, _, _ in set(chunks(g)) & set(chunks(p)))
    assert counts.correct == same
