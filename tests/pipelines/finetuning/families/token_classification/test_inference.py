"""Token classification's inference (families/token_classification/inference.py): rows of words or
raw text checked, encoded and tagged as the evaluation tags its sentences (its own code on the same
words and model), long texts windowed so that no word is cut off (on a model whose tags ignore
context, the windowed tags equal one pass over the whole text), entities as conlleval reads the
tags, and CoNLL files as rows; on the suite's fine-tuned model, its predictions file again."""

import gzip
import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from albert_model import AlbertConfig
from albert_model.heads import AlbertForTokenClassification
from albert_model.hf import load_hf_pretrained
from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.families.token_classification.inference import INFERENCE, split_words
from pipelines.finetuning.families.token_classification.metrics import conll_scores
from pipelines.finetuning.families.token_classification.training import encode_words
from pipelines.finetuning.families.token_classification.windows import plan_windows, tagged_from
from pipelines.finetuning.inference import ModelUse
from pipelines.finetuning.loop import predict
from pipelines.finetuning.tokenizer import PairTokenizer
from pipelines.storage.models import ModelUsage, applied_length, read_model_config, read_usage, save_model

LABELS = ["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]
FAMILY = FAMILIES["token_classification"].load_training()


def model_use(folder: str, length: int | None = None) -> ModelUse:
    """What the generic side reads from a model folder for the family."""
    config = read_model_config(folder, "model")
    usage = read_usage(config, folder)
    names = [config["id2label"][k] for k in sorted(config["id2label"], key=int)]
    settings = usage.settings if usage else {}
    return ModelUse(PairTokenizer(folder), applied_length(config, length, "length", folder), names, settings, None)


def apply(model, rows: list[dict], use: ModelUse) -> list[dict]:
    """INFERENCE on `rows` with `model`, its features run as the evaluation runs them."""
    encoded = INFERENCE.encode(rows, use)
    outputs = predict(
        model, encoded.features, 8, use.tokenizer.pad_id, scores_of=FAMILY.scores, collate_fn=FAMILY.collate
    )
    assert len(encoded.owners) == len(encoded.features)
    return INFERENCE.predictions(rows, encoded, outputs, use)


def export(folder, pretrained: str, length: int, **config) -> str:
    """A random tiny token-classification export with the record fine-tuning writes."""
    torch.manual_seed(0)
    settings = AlbertConfig.from_preset("tiny", vocab_size=1000).replace(num_labels=len(LABELS), **config)
    usage = ModelUsage("token_classification", length, {"tag_scheme": "IOB2", "word_start": "first_piece"})
    save_model(AlbertForTokenClassification(settings).eval(), pretrained, str(folder), LABELS, None, usage)
    return str(folder)


@pytest.fixture(scope="module")
def tagger(tiny_pretrained, tmp_path_factory):
    folder = export(tmp_path_factory.mktemp("tagger"), tiny_pretrained, 24)
    return load_hf_pretrained(folder, AlbertForTokenClassification).eval(), model_use(folder)


def test_raw_text_splits_into_conll_like_words_that_keep_their_characters():
    text = "John's e-mail, sent to the U.S. (3.5 km) today!"
    words = split_words(text)
    assert [w for w, _, _ in words] == [
        "John's", "e-mail", ",", "sent", "to", "the", "U.S", ".", "(", "3.5", "km", ")", "today", "!",
    ]  # fmt: skip
    assert all(text[start:end] == word for word, start, end in words)


@pytest.mark.parametrize(
    "row, reason",
    [
        ({"tokens": ["John", "visited", "Paris"]}, None),
        ({"tokens": np.array(["John", "left"])}, None),  # a list column as a batch of arrays gives it
        ({"text": "John visited Paris."}, None),
        ({"tokens": None, "text": "Paris."}, None),
        ({}, "missing_text"),
        ({"tokens": None, "text": None}, "missing_text"),
        ({"tokens": ["a"], "text": "a"}, "tokens_and_text"),
        ({"tokens": "John visited Paris"}, "not_a_list_of_strings"),  # never split or parsed
        ({"tokens": ["John", 3]}, "not_a_list_of_strings"),
        ({"tokens": []}, "empty_tokens"),
        ({"tokens": ["John", " "]}, "empty_token"),
        ({"text": 3.5}, "not_a_string"),
        ({"text": ["John"]}, "not_a_string"),
        ({"text": " \n\t"}, "empty_text"),
    ],
)
def test_each_row_is_predictable_or_rejected_with_its_reason(row, reason):
    assert INFERENCE.check_row(row) == reason


@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=80), budget=st.integers(9, 40))
def test_windows_fit_cover_every_word_and_tag_it_where_it_has_the_most_context(lengths, budget):
    windows = plan_windows(lengths, budget)
    assert windows[0][0] == 0 and windows[-1][1] == len(lengths)
    assert all(sum(lengths[start:end]) <= budget for start, end in windows)
    assert all(s < next_s <= end for (s, end), (next_s, _) in zip(windows, windows[1:]))  # no word skipped
    if sum(lengths) <= budget:
        assert windows == [(0, len(lengths))]
    chosen = tagged_from(lengths, windows)

    def context(word: int, window: tuple[int, int]) -> int:
        start, end = window
        return min(sum(lengths[start:word]), sum(lengths[word + 1 : end]))

    for word, index in enumerate(chosen):
        holding = [w for w in windows if w[0] <= word < w[1]]
        assert windows[index] in holding
        assert context(word, windows[index]) == max(context(word, w) for w in holding)


def test_a_sentence_is_tagged_as_the_evaluation_tags_it(tagger, tmp_path):
    """The finetune stage's evaluation (the family reading a CoNLL eval file, its features through
    loop.predict, its evaluate's predictions.conll) against INFERENCE on the same sentences, given
    as tokens and as raw text; one sentence too long for max_seq_length is windowed by both. A
    sentence that fits is encoded_words' feature (transformers' word starts, test_training.py)."""
    model, use = tagger
    sentences = [
        ["John", "visited", "New", "York", "today", "."],
        ["The", "market", "rose", "after", "the", "minister", "said", "that", "the", "match", "was", "won"],
        ["Düsseldorf", ",", "1996-08-22", "!"],
        ["a"],
        ["the", "final", "minutes", "while", "the", "film", "and", "the", "new", "phone", "were", "shown"] * 4,
    ]
    (tmp_path / "train.conll").write_text("".join(f"w {tag}\n" for tag in LABELS))
    (tmp_path / "eval.conll").write_text("\n".join("".join(f"{w} O\n" for w in words) for words in sentences))
    cfg = FinetuneSection(
        task="token_classification",
        train_path=str(tmp_path / "train.conll"),
        eval_path=str(tmp_path / "eval.conll"),
        max_seq_length=use.max_seq_length,
    )
    task = FAMILY.encode(cfg, use.tokenizer)
    assert task.label_names == LABELS and len(task.eval) > len(sentences)  # the last sentence windowed
    scores = predict(model, task.eval, 8, use.tokenizer.pad_id, scores_of=FAMILY.scores, collate_fn=FAMILY.collate)
    lines = FAMILY.evaluate(cfg, task, scores).files["predictions.conll"]
    evaluated = [[line.split()[2] for line in block.splitlines()] for block in lines.split("\n\n") if block]
    assert len({tag for tags in evaluated for tag in tags}) > 1  # the random model tags more than one way

    by_tokens = apply(model, [{"tokens": words} for words in sentences], use)
    assert [p["tags"] for p in by_tokens] == evaluated
    assert [p["words"] for p in by_tokens] == sentences
    by_text = apply(model, [{"text": " ".join(words)} for words in sentences], use)
    assert [p["tags"] for p in by_text] == evaluated
    features = INFERENCE.encode([{"tokens": words} for words in sentences[:4]], use).features
    assert [ids for ids, _ in features] == [
        encode_words(use.tokenizer, w, use.max_seq_length)[0] for w in sentences[:4]
    ]


def test_entities_are_conlleval_chunks_with_their_words_and_characters(tagger):
    model, use = tagger
    text = "john visited new york today , said mary of the market in london"
    (by_text,) = apply(model, [{"text": text}], use)
    (by_tokens,) = apply(model, [{"tokens": text.split()}], use)
    gold = conll_scores([by_text["tags"]], [by_text["tags"]])
    assert len(by_text["entities"]) == gold["gold_entities"] > 0
    for entity in by_text["entities"]:
        words = by_text["words"][entity["start_word"] : entity["end_word"]]
        assert entity["text"] == text[entity["start"] : entity["end"]] == " ".join(words)
        assert {by_text["tags"][entity["start_word"]].partition("-")[2]} == {entity["type"]}
    assert [(e["type"], e["start_word"], e["end_word"], e["text"]) for e in by_tokens["entities"]] == [
        (e["type"], e["start_word"], e["end_word"], e["text"]) for e in by_text["entities"]
    ]
    assert all(e["start"] is None and e["end"] is None for e in by_tokens["entities"])


def test_a_model_recording_another_word_start_is_refused(tagger):
    _, use = tagger
    other = ModelUse(use.tokenizer, use.max_seq_length, use.label_names, {"word_start": "last_piece"}, None)
    with pytest.raises(BadInput, match="'last_piece'"):
        INFERENCE.encode([{"tokens": ["a"]}], other)


def test_an_entity_at_word_2500_of_a_3000_word_text_is_found(tiny_pretrained, tmp_path):
    """A model whose tag of a word depends on that word alone (attention's values and the position
    embeddings zeroed): the text windowed at 32 tokens is tagged as in one pass of 4,096 positions,
    so each word's tag was read at its own first piece in some window; and the entity placed at
    words 2,500-2,501 is the one found."""
    folder = export(tmp_path / "model", tiny_pretrained, 32, max_position_embeddings=4096)
    model = load_hf_pretrained(folder, AlbertForTokenClassification).eval()
    with torch.no_grad():
        model.albert.embeddings.position_embeddings.weight.zero_()
        for layer in model.albert.encoder.albert_layer_groups[0].albert_layers:
            layer.attention.value.weight.zero_()
            layer.attention.value.bias.zero_()
    windowed, whole = model_use(folder), model_use(folder, 4096)
    sp = windowed.tokenizer.sp  # words of one piece each, the vocabulary's: 3,000 fit in one pass
    candidates = [p[1:] for p in map(sp.id_to_piece, range(sp.get_piece_size())) if p[1:].isalpha() and p[1:].islower()]
    (alone,) = apply(model, [{"tokens": candidates}], whole)
    tag = dict(zip(candidates, alone["tags"]))
    filler = next(w for w in candidates if tag[w] == "O")
    first = next(w for w in candidates if tag[w].startswith("B-"))
    kind = tag[first][2:]
    words = [filler] * 3000
    words[2500] = first
    text = " ".join(words)
    assert windowed.max_seq_length == 32 and len(INFERENCE.encode([{"text": text}], windowed).features) > 100

    (long_run,) = apply(model, [{"text": text}], windowed)
    (one_pass,) = apply(model, [{"text": text}], whole)
    assert long_run["tags"] == one_pass["tags"]
    start = 2500 * (len(filler) + 1)
    assert long_run["entities"] == [
        {"type": kind, "start_word": 2500, "end_word": 2501, "text": first, "start": start, "end": start + len(first)}
    ]


def test_a_conll_file_reads_as_token_rows_numbered_by_sentence():
    conll = "-DOCSTART- -X- O\n\nEU NNP B-ORG\nrejects VBZ O\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n\n\n"
    rows = INFERENCE.read_file("data/dev.conll", conll.encode())
    assert rows == [
        {"id": 0, "tokens": ["EU", "rejects"], "label": ["B-ORG", "O"]},
        {"id": 1, "tokens": ["Peter", "Blackburn"], "label": ["B-PER", "I-PER"]},
    ]
    assert INFERENCE.read_file("s3://b/dev.conll.gz", gzip.compress(conll.encode())) == rows
    assert INFERENCE.read_file("raw.conll", b"EU\nrejects\n\nPeter\n") == [
        {"id": 0, "tokens": ["EU", "rejects"]},  # no tag column: nothing to score against
        {"id": 1, "tokens": ["Peter"]},
    ]
    assert INFERENCE.read_file("rows.jsonl", b'{"tokens": ["a"]}\n') is None  # a table: predict reads it


@pytest.mark.slow
def test_the_suite_model_tags_its_eval_file_as_its_predictions_file(family_suite):
    """The `entities` task of the evaluation suite: its dev.conll read by read_file and tagged with
    its exported best model gives the predictions.conll the stage wrote (a sentence longer than the
    model's 16 tokens included), and conlleval's F1 of those tags against the file's gold tags is
    the reported metric."""
    config, run = family_suite
    out = run / "finetune" / "entities"
    dev = config.parent / "dev.conll"
    rows = INFERENCE.read_file(str(dev), dev.read_bytes())
    use = model_use(str(out / "best"))
    assert use.max_seq_length == 16 and use.settings == {"tag_scheme": "IOB2", "word_start": "first_piece"}
    assert len(INFERENCE.encode(rows, use).features) > len(rows)  # a sentence over 16 tokens: windowed by both
    model = load_hf_pretrained(out / "best", AlbertForTokenClassification).eval()
    predicted = apply(model, rows, use)

    written = [block.splitlines() for block in (out / "predictions.conll").read_text().split("\n\n") if block]
    assert [p["words"] for p in predicted] == [[line.split()[0] for line in s] for s in written]
    assert [p["tags"] for p in predicted] == [[line.split()[2] for line in s] for s in written]
    best = json.loads((out / "best.json").read_text())
    assert conll_scores([r["label"] for r in rows], [p["tags"] for p in predicted])["f1"] == best["metrics"]["f1"]
