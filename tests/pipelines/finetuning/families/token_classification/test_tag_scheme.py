"""The tag scheme a token-classification export records (issue #44): how its tags mark entities,
found from the tags themselves (training.tag_scheme)."""

import pytest

from pipelines.finetuning.families.token_classification.metrics import conll_scores
from pipelines.finetuning.families.token_classification.training import tag_scheme


@pytest.mark.parametrize(
    ("sentences", "scheme"),
    [
        ([["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG"]], "IOB2"),
        # CoNLL-2003's original files: I- opens an entity, B- only between two of one type
        ([["I-PER", "I-PER", "O"], ["O", "I-LOC", "B-LOC"]], "IOB1"),
        ([["O", "I-ORG"]], "IOB1"),  # after O
        ([["B-PER", "I-LOC"]], "IOB1"),  # after another type
        ([["S-PER", "O", "B-LOC", "E-LOC"]], "IOBES"),
        ([["NN", "VBZ", "DT"]], "none"),  # parts of speech
        ([["O", "O"]], "none"),
    ],
)
def test_the_scheme_is_read_from_the_tags(sentences, scheme):
    assert tag_scheme(sentences) == scheme


def test_iob1_and_iob2_spell_the_same_entities_as_conlleval_reads_them():
    """What the record tells a user: the tags are read by conlleval's rules whichever the scheme."""
    iob1, iob2 = [["I-PER", "I-PER", "B-PER", "O", "I-LOC"]], [["B-PER", "I-PER", "B-PER", "O", "B-LOC"]]
    assert (tag_scheme(iob1), tag_scheme(iob2)) == ("IOB1", "IOB2")
    assert conll_scores(iob1, iob2)["f1"] == 100.0
