"""The fine-tuning stage on token classification (finetune.task=token_classification, the `entities`
task of the shared evaluation suite: tests/pipelines/family_tasks.py) through Ray Tune: CoNLL in,
conlleval's scores of the predictions file it writes, every sentence accounted for, and an export
transformers loads as AlbertForTokenClassification with our logits."""

import json

import pytest
import torch
import transformers

from pipelines.finetuning.families.token_classification.metrics import conll_scores
from pipelines.finetuning.families.token_classification.training import encode_words
from pipelines.finetuning.tokenizer import PairTokenizer

from .family_tasks import conll


@pytest.mark.slow
def test_a_conll_search_writes_conlleval_input_and_transformers_loads_it(family_suite):
    out = family_suite[1] / "finetune" / "entities"
    best = json.loads((out / "best.json").read_text())
    assert best["metric"] == "f1" and {"precision", "recall", "accuracy", "eval_loss"} <= set(best["metrics"])
    assert best["label_names"] == ["B-LOC", "B-PER", "I-LOC", "O"] and best["eval_examples"] == 15
    source = json.loads((out / "task.json").read_text())["examples"]["inputs"][0]
    assert (source["read"], source["usable"], source["rejected"]) == (61, 60, {"column_count": 1})

    # predictions.conll is conlleval's input: its scores are the run's
    sentences = [block.splitlines() for block in (out / "predictions.conll").read_text().split("\n\n") if block]
    gold = [[line.split()[1] for line in s] for s in sentences]
    predicted = [[line.split()[2] for line in s] for s in sentences]
    dev = [block.splitlines() for block in conll(15, 1).split("\n\n") if block.strip()]
    assert [[line.split()[0] for line in s] for s in sentences] == [[line.split()[0] for line in s] for s in dev]
    assert gold == [[line.split()[3] for line in s] for s in dev]
    scores = conll_scores(gold, predicted)
    assert (scores["f1"], scores["precision"], scores["recall"]) == tuple(
        best["metrics"][k] for k in ("f1", "precision", "recall")
    )

    exported = json.loads((out / "best" / "config.json").read_text())
    assert exported["architectures"] == ["AlbertForTokenClassification"]
    assert exported["id2label"] == {"0": "B-LOC", "1": "B-PER", "2": "I-LOC", "3": "O"}
    model = transformers.AlbertForTokenClassification.from_pretrained(out / "best").eval()
    from albert_model.heads import AlbertForTokenClassification
    from albert_model.hf import load_hf_pretrained

    ours = load_hf_pretrained(out / "best", AlbertForTokenClassification).eval()
    ids, _ = encode_words(PairTokenizer(str(out / "best")), ["mary", "visited", "new", "york", "today"], 16)
    inputs = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(ours(inputs), model(input_ids=inputs).logits, rtol=1e-5, atol=1e-5)
