"""The fine-tuning stage on a multi-label task (finetune.task=multi_label, the `topics` task of the
shared evaluation suite: tests/pipelines/family_tasks.py) through Ray Tune: its
metric, its account of every row, and an export transformers loads as a multi-label classifier
that gives our scores."""

import csv
import json

import pytest
import torch
import transformers

from pipelines.config import load_config
from pipelines.finetuning.tokenizer import PairTokenizer, pad_batch
from pipelines.rundir.registry import is_up_to_date

from .family_tasks import topics


@pytest.mark.slow
def test_a_multi_label_search_scores_micro_f1_and_transformers_loads_the_export(family_suite):
    config_file, run_dir = family_suite
    config = load_config(str(config_file))
    out = run_dir / "finetune" / "topics"
    held = topics(20, 1)
    best = json.loads((out / "best.json").read_text())
    trials = list(csv.DictReader((out / "trials.csv").read_text().splitlines()))
    assert best["metric"] == "micro_f1" and best["value"] == best["metrics"]["micro_f1"] == float(trials[0]["micro_f1"])
    assert {"macro_f1", "subset_accuracy", "eval_loss"} <= set(best["metrics"])
    assert best["label_names"] == ["business", "politics", "sport"] and best["eval_examples"] == 20
    source = json.loads((out / "task.json").read_text())["examples"]["inputs"][0]
    assert (source["read"], source["usable"], source["rejected"]) == (82, 80, {"empty_text": 1, "missing_label": 1})
    assert is_up_to_date(config, "finetune")
    # the reported metrics, recomputed from predictions.jsonl (an eval row's id and its classes)
    from sklearn.metrics import accuracy_score, f1_score

    predicted = {
        p["id"]: p["prediction"] for p in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())
    }
    assert sorted(predicted) == list(range(20))
    names = best["label_names"]
    hot = lambda labels: [int(n in labels) for n in names]  # noqa: E731
    gold, guess = [hot(r["topics"]) for r in held], [hot(predicted[i]) for i in range(20)]
    assert best["metrics"]["micro_f1"] == pytest.approx(f1_score(gold, guess, average="micro", zero_division=0))
    assert best["metrics"]["subset_accuracy"] == pytest.approx(accuracy_score(gold, guess))
    exported = json.loads((out / "best" / "config.json").read_text())
    assert exported["problem_type"] == "multi_label_classification"
    assert exported["id2label"] == {"0": "business", "1": "politics", "2": "sport"}

    # transformers' model from the export: its loss is BCE over the classes, and its logits are ours
    model = transformers.AutoModelForSequenceClassification.from_pretrained(out / "best").eval()
    tokenizer = PairTokenizer(str(out / "best"))
    batch = pad_batch([tokenizer.encode(r["text"], None, 16) for r in held[:8]], tokenizer.pad_id)
    inputs = {k: torch.from_numpy(v) for k, v in batch.items()}
    targets = torch.tensor([[float(t in r["topics"]) for t in best["label_names"]] for r in held[:8]])
    with torch.no_grad():
        theirs = model(**inputs, labels=targets)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(theirs.logits, targets)
    torch.testing.assert_close(theirs.loss, expected)
    from albert_model.hf import load_hf_pretrained
    from albert_model.model import AlbertForSequenceClassification

    ours = load_hf_pretrained(out / "best", AlbertForSequenceClassification).eval()
    with torch.no_grad():
        logits = ours(**inputs)
    torch.testing.assert_close(logits, theirs.logits, rtol=1e-5, atol=1e-5)
