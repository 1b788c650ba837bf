"""The fine-tuning stage on multiple choice (finetune.task=multiple_choice, the `endings` task of the
shared evaluation suite: tests/pipelines/family_tasks.py) through Ray Tune: a
SWAG-layout csv in, accuracy and the predictions file out, every question accounted for, and an
export transformers loads as AlbertForMultipleChoice with our logits."""

import json

import pytest
import torch
import transformers

from pipelines.finetuning.families.multiple_choice.training import collate, encode_question
from pipelines.finetuning.tokenizer import PairTokenizer

from .family_tasks import ANIMALS, swag


@pytest.mark.slow
def test_a_swag_search_scores_accuracy_and_transformers_loads_the_export(family_suite):
    out = family_suite[1] / "finetune" / "endings"
    best = json.loads((out / "best.json").read_text())
    assert best["metric"] == "accuracy" and best["eval_examples"] == 12 and best["label_names"] is None
    source = json.loads((out / "task.json").read_text())["examples"]["inputs"][0]
    assert (source["read"], source["usable"], source["rejected"]) == (41, 40, {"label_not_a_choice": 1})
    # the reported accuracy, recomputed from predictions.jsonl and the eval file's labels (by id: fold-ind)
    predictions = {
        p["id"]: p["prediction"] for p in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())
    }
    gold = {line.split(",")[1]: int(line.rsplit(",", 1)[1]) for line in swag(12, 1).splitlines()[1:]}
    assert predictions.keys() == gold.keys()
    assert best["value"] == sum(predictions[i] == gold[i] for i in gold) / 12

    exported = json.loads((out / "best" / "config.json").read_text())
    assert exported["architectures"] == ["AlbertForMultipleChoice"]
    model = transformers.AlbertForMultipleChoice.from_pretrained(out / "best").eval()
    from albert_model.heads import AlbertForMultipleChoice
    from albert_model.hf import load_hf_pretrained

    ours = load_hf_pretrained(out / "best", AlbertForMultipleChoice).eval()
    tokenizer = PairTokenizer(str(out / "best"))
    endings = [ANIMALS[a] + " loudly." for a in sorted(ANIMALS)]
    question = encode_question(tokenizer, "It is morning on the farm.", "The dog", endings, 24)
    batch = collate([question], [0], tokenizer.pad_id)
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch), model(**batch).logits, rtol=1e-5, atol=1e-5)
