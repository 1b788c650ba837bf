"""Token classification inputs: CoNLL files read sentence by sentence, jsonl rows of token and tag
lists, every sentence used or counted under its reason."""

import json

import pytest

from pipelines.errors import BadInput
from pipelines.finetuning.families.token_classification.reading import read_conll, read_token_table

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER

BRUSSELS NNP B-NP B-LOC
1996-08-22 CD I-NP
"""


def test_a_conll_file_is_read_sentence_by_sentence_and_a_line_without_its_tag_is_counted(tmp_path):
    (tmp_path / "train.conll").write_text(CONLL)
    ner = read_conll(str(tmp_path / "train.conll"), -1)
    assert ner.tokens == [["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn"]]
    assert ner.tags == [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER"]]
    # the last sentence's second line has 3 columns, not 4: its last column is a chunk tag, so the
    # sentence is rejected (as conlleval stops at it), with its first line
    assert ner.summary()["read"] == 3 and ner.rejected == {"column_count": 1}
    assert ner.rejection_examples == [f"{tmp_path}/train.conll line 12: column_count"]
    pos = read_conll(str(tmp_path / "train.conll"), 1)  # the part-of-speech column instead
    assert pos.tags[0] == ["NNP", "VBZ", "JJ", "NN", "."] and len(pos) == 2
    (tmp_path / "two.conll").write_text("EU B-ORG\nsays O\n\nParis B-LOC\n")
    assert read_conll(str(tmp_path / "two.conll"), 3).rejected == {"missing_tag": 2}  # no column 3


def test_jsonl_rows_of_tokens_and_tags_are_used_or_counted(tmp_path):
    rows = [
        {"tokens": ["Rome", "won"], "tags": ["B-LOC", "O"]},
        {"tokens": ["a", "b"], "tags": ["O"]},  # length_mismatch
        {"tokens": [], "tags": []},  # empty_tokens
        {"tokens": ["x"]},  # missing_tags
        {"tokens": ["ok"], "tags": [0]},  # an integer tag is the class "0"
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = read_token_table(str(tmp_path / "t.jsonl"), "tokens", "tags")
    assert read.tokens == [["Rome", "won"], ["ok"]] and read.tags == [["B-LOC", "O"], ["0"]]
    assert read.rejected == {"length_mismatch": 1, "empty_tokens": 1, "missing_tags": 1} and read.read == 5
    with pytest.raises(BadInput, match=r"no column 'ner_tags' \(finetune.tags_column\)"):
        read_token_table(str(tmp_path / "t.jsonl"), "tokens", "ner_tags")
