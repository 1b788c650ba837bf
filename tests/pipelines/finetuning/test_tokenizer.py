"""Our fine-tuning encoding gives transformers' AlbertTokenizer ids, truncation included."""

import json
import shutil

import pytest
from transformers import AlbertTokenizer

from pipelines.finetuning.tables import bbc_news_examples
from pipelines.finetuning.tokenizer import PairTokenizer, pad_batch


@pytest.fixture(scope="module")
def texts():
    lines = [line for text in bbc_news_examples().texts[1::40] for line in text.splitlines() if line.strip()]
    return lines + ["Café ``quoted'' text  with   SPACES", "naïve résumé 3.5%, £600m", "x"]


def test_single_texts_and_pairs_match_transformers(tiny_pretrained, texts):
    ours, theirs = PairTokenizer(tiny_pretrained), AlbertTokenizer.from_pretrained(tiny_pretrained)
    for max_length in (8, 33, 512):
        for i, text in enumerate(texts):
            pair = texts[i - 1] if i % 2 else None
            ref = theirs(text, pair, truncation=True, max_length=max_length, return_token_type_ids=True)
            assert ours.encode(text, pair, max_length) == (ref["input_ids"], ref["token_type_ids"]), (text, pair)


def test_cased_vocabulary_is_not_lowercased(tiny_pretrained, tmp_path, texts):
    cased = tmp_path / "cased"
    shutil.copytree(tiny_pretrained, cased)
    config = json.loads((cased / "tokenizer_config.json").read_text())
    (cased / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": False}))
    ours, theirs = PairTokenizer(str(cased)), AlbertTokenizer.from_pretrained(str(cased))
    assert not ours.lowercase
    assert ours.pieces("BBC News") != PairTokenizer(tiny_pretrained).pieces("BBC News")
    for text in texts[:50]:
        assert ours.encode(text, None, 64)[0] == theirs(text, truncation=True, max_length=64)["input_ids"]


def test_pad_batch_pads_right_and_masks():
    batch = pad_batch([([2, 7, 3], [0, 0, 0]), ([2, 3, 9, 3], [0, 0, 1, 1])], pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 3, 0], [2, 3, 9, 3]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0], [0, 0, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_missing_spiece_model_names_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="spiece.model: not found"):
        PairTokenizer(str(tmp_path))
