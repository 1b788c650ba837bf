"""The token classification family (finetune.task=token_classification) on hand-written files in
CoNLL-2003's layout and transformers' datasets layout: every sentence used or counted, a word's
first piece as transformers' tokenizer gives it, the loss transformers' AlbertForTokenClassification
computes, and conlleval's scores and input format for the predictions."""

import numpy as np
import pytest
import torch
import transformers

from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families.token_classification.metrics import conll_scores
from pipelines.finetuning.families.token_classification.training import IGNORED, encode_words
from pipelines.finetuning.tokenizer import PairTokenizer

from .test_reading import CONLL


def test_first_pieces_are_transformers_word_starts(tiny_pretrained):
    words = ["Peter", "Blackburn", "visited", "Düsseldorf", "in", "1996-08-22", "!"]
    ours = PairTokenizer(tiny_pretrained)
    ids, starts = encode_words(ours, words, 64)
    theirs = transformers.AutoTokenizer.from_pretrained(tiny_pretrained)
    encoding = theirs(words, is_split_into_words=True)
    assert ids == encoding["input_ids"]
    word_ids = encoding.word_ids()
    assert starts == [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
    cut_ids, cut_starts = encode_words(ours, words, 6)  # [CLS] + 4 pieces + [SEP] at most
    assert len(cut_ids) <= 6 and cut_starts == starts[: len(cut_starts)] and len(cut_starts) < len(words)


def ner_config(tmp_path, **changes) -> FinetuneSection:
    (tmp_path / "train.conll").write_text(CONLL)
    return FinetuneSection(task="token_classification", train_path=str(tmp_path / "train.conll"), **changes)


def test_targets_sit_on_first_pieces_and_an_unseen_eval_tag_names_its_line(tmp_path, tiny_pretrained):
    tokenizer = PairTokenizer(tiny_pretrained)
    (tmp_path / "eval.conll").write_text("EU NNP B-NP B-ORG\nsays VBZ B-VP O\n\nParis NNP B-NP B-LOC\n")
    cfg = ner_config(tmp_path, eval_path=str(tmp_path / "eval.conll"), max_seq_length=32)
    with pytest.raises(BadInput, match=r"eval.conll line 4: tag 'B-LOC' never appears in the training data"):
        task_family("token_classification").encode(cfg, tokenizer)
    (tmp_path / "eval.conll").write_text("EU NNP B-NP B-ORG\nsays VBZ B-VP O\n")
    task = task_family("token_classification").encode(cfg, tokenizer)
    assert task.label_names == ["B-MISC", "B-ORG", "B-PER", "I-PER", "O"] and task.num_labels == 5
    ids, starts = encode_words(tokenizer, ["EU", "rejects", "German", "call", "."], 32)
    assert task.train[0][0] == ids
    row = task.train_targets[0]
    assert [row[i] for i in starts] == [1, 4, 0, 4, 4]
    assert all(row[i] == IGNORED for i in range(len(row)) if i not in starts)
    assert task.accounting["inputs"][0]["rejected"] == {"column_count": 1} and task.eval_examples == 1


def test_the_loss_is_transformers_token_classification_loss(tiny_pretrained):
    family = task_family("token_classification")
    model = transformers.AlbertForTokenClassification.from_pretrained(tiny_pretrained, num_labels=3).eval()
    ids = torch.tensor([[2, 40, 41, 42, 3], [2, 50, 3, 0, 0]])
    targets = torch.tensor([[IGNORED, 1, IGNORED, 2, IGNORED], [IGNORED, 0, IGNORED, IGNORED, IGNORED]])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=targets)
    tagged = int((targets != IGNORED).sum())  # transformers averages over the tagged positions
    torch.testing.assert_close(family.loss_sum(out.logits, targets) / tagged, out.loss, rtol=1e-6, atol=1e-7)


def test_evaluation_scores_whole_entities_and_writes_conlleval_input(tmp_path, tiny_pretrained):
    """Forced scores: the argmax at each word's first piece is its predicted tag, and the metrics
    are conlleval's on those tags; a sentence longer than max_seq_length is windowed, each word
    tagged at its place in one window, none cut off."""
    tokenizer = PairTokenizer(tiny_pretrained)
    (tmp_path / "eval.conll").write_text("Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\nsaid VBD B-VP O\n")
    cfg = ner_config(tmp_path, eval_path=str(tmp_path / "eval.conll"), max_seq_length=32)
    family = task_family("token_classification")
    task = family.encode(cfg, tokenizer)
    names = task.label_names
    ((features, positions),) = task.reference.places
    assert len(task.eval) == 1 and list(features) == [0, 0, 0]
    assert list(positions) == encode_words(tokenizer, ["Peter", "Blackburn", "said"], 32)[1]

    def forced(task, tags: list[str]) -> np.ndarray:
        scores = np.zeros((len(task.eval), cfg.max_seq_length, len(names)), np.float32)
        ((features, positions),) = task.reference.places
        scores[features, positions, [names.index(t) for t in tags]] = 5.0
        return scores

    evaluation = family.evaluate(cfg, task, forced(task, ["B-PER", "O", "O"]))  # the entity's second word missed
    expected = conll_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    assert evaluation.metrics["f1"] == expected["f1"] == 0.0 and evaluation.metrics["accuracy"] == pytest.approx(
        200 / 3
    )
    assert evaluation.files["predictions.conll"] == "Peter B-PER B-PER\nBlackburn I-PER O\nsaid O O\n\n"
    assert np.isfinite(evaluation.metrics["eval_loss"])
    # [CLS] + 3 pieces + [SEP]: the sentence is windowed, and every word is tagged
    short = family.encode(ner_config(tmp_path, eval_path=str(tmp_path / "eval.conll"), max_seq_length=5), tokenizer)
    assert len(short.eval) > 1 and all(len(ids) <= 5 for ids, _ in short.eval)
    assert "eval_words" not in short.truncated and short.eval_examples == 1
    assert (short.eval_targets != IGNORED).sum() == 3  # each word's target once, where it is tagged
    windowed = family.evaluate(cfg, short, forced(short, ["B-PER", "I-PER", "O"]))
    assert windowed.files["predictions.conll"] == "Peter B-PER B-PER\nBlackburn I-PER I-PER\nsaid O O\n\n"
    assert windowed.metrics["f1"] == 100.0
