"""The fine-tuning stage on the question-answering family: a SQuAD v2.0 search writes the official
scripts' files (predictions.json, null_odds.json) whose scores are the reported ones, the export
loads in transformers, every question is used or counted; the fingerprints of the other families
stay what they were before question answering existed."""

import csv
import json
import os
from pathlib import Path

import pytest
import transformers

from pipelines.config import load_config
from pipelines.finetuning.families.question_answering.demo import bbc_qa_examples
from pipelines.finetuning.families.question_answering.metrics import read_squad_golds, squad_scores
from pipelines.finetuning.families.question_answering.reading import flat_row
from pipelines.finetuning.tokenizer import PairTokenizer
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint
from pipelines.storage import filesystem, write_text
from pipelines.storage.models import ModelUsage, read_usage

# stage_fingerprint at 9188c23 (before the question-answering keys existed) of a finetune stage with
# finetune.pretrained=model, a folder of fixed content: the classification and regression
# fingerprints, so that their outputs stay up to date across the change.
FINGERPRINTS_BEFORE = {
    (): "5d145154fce1f439b05ced4c44fb79cf70f04e83b665382f7892c54ef17f724a",
    ("finetune.task=regression", "tune.metric=spearman"): (
        "abace5ab163f5dd3b10f3866ef57a218cd884d50218621280a211dfb60ea85ed"
    ),
    ("finetune.text_pair_column=b", "finetune.weight_decay=0.02"): (
        "347762ca3cb24889e94c76401f3a351f57f3e83aeaed94173e4f1ca13792ff00"
    ),
}
"""Fingerprints taken by the code before question answering (the third by 4f87cb1's, equal there)."""


def fixed_model(tmp_path: Path) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["AlbertForPreTraining"], "model_type": "albert"}\n')
    (model / "model.safetensors").write_bytes(b"\0" * 1000)
    (model / "spiece.model").write_text("x")
    return model


def test_the_other_families_keep_their_fingerprints_and_qa_keys_change_only_qa(tmp_path, monkeypatch):
    fixed_model(tmp_path)
    monkeypatch.chdir(tmp_path)  # the path is part of the fingerprint: the same one as when it was taken

    def fingerprint(*overrides):
        return stage_fingerprint(
            load_config(overrides=["run_dir=run", "finetune.pretrained=model", *overrides]), "finetune"
        )

    for overrides, before in FINGERPRINTS_BEFORE.items():
        assert fingerprint(*overrides) == before, overrides
        assert fingerprint(*overrides, "finetune.doc_stride=64", "finetune.n_best_size=5") == before
    # a key tune.space searches counts at its default (no trial reads it): this config's output,
    # d22a157e... before that rule, is stale once
    assert fingerprint("finetune.text_pair_column=b", "finetune.lr=0.001") == fingerprint("finetune.text_pair_column=b")
    qa = fingerprint("finetune.task=question_answering")
    assert qa not in FINGERPRINTS_BEFORE.values()
    assert fingerprint("finetune.task=question_answering", "finetune.doc_stride=64") != qa
    assert fingerprint("finetune.task=question_answering", "finetune.max_answer_length=10") != qa
    for unread in ("finetune.label_column=y", "finetune.classifier_dropout=0.3"):  # not read by QA
        assert fingerprint("finetune.task=question_answering", unread) == qa
    # the later families' keys, and a key at its neutral value (grad_accum_steps=1: the whole batch at
    # once, as before the key), leave those fingerprints as they were; another value counts
    for overrides, before in FINGERPRINTS_BEFORE.items():
        later = ("finetune.label_delimiter=;", "finetune.tags_column=ner", "finetune.choices_column=endings")
        assert fingerprint(*overrides, *later, "finetune.grad_accum_steps=1") == before, overrides
        assert fingerprint(*overrides, "finetune.grad_accum_steps=2") != before, overrides


def squad_file(examples, version="v2.0") -> dict:
    """The official layout: one article, a paragraph per context."""
    paragraphs: dict[str, list] = {}
    for e in examples:
        paragraphs.setdefault(e.context, []).append(
            {
                "id": e.id,
                "question": e.question,
                "answers": [{"text": t, "answer_start": s} for t, s in e.answers],
                "is_impossible": not e.answers,
            }
        )
    return {
        "version": version,
        "data": [{"title": "bbc", "paragraphs": [{"context": c, "qas": q} for c, q in paragraphs.items()]}],
    }


@pytest.mark.slow
@pytest.mark.e2e  # a second QA fine-tune beside the suite's (make test keeps one a family): make test-e2e
def test_a_squad_v2_search_writes_the_official_files_and_transformers_loads_the_export(
    ray_session, s3_endpoint, tiny_pretrained, tmp_path, capsys
):
    from pipelines.stages.finetune import run_finetune

    examples = bbc_qa_examples(seed=1, max_examples=260, unanswerable_fraction=0.3)
    train, held = examples[:200], examples[200:]
    document = squad_file(train)
    qas = document["data"][0]["paragraphs"][0]["qas"]
    qas.append({"id": "bad-start", "question": "Who?", "answers": [{"text": "zz", "answer_start": 0}]})
    qas.append({"id": "no-question", "answers": [], "is_impossible": True})
    answered = next(qa for qa in qas if qa["answers"])
    qas.append({"id": "impossible-answered", "question": "Who?", "is_impossible": True, "answers": answered["answers"]})
    (tmp_path / "train.json").write_text(json.dumps(document))
    filesystem("s3://qa-eval/x")[0].mkdir("qa-eval")
    write_text("s3://qa-eval/dev.jsonl", "".join(json.dumps(flat_row(e)) + "\n" for e in held))

    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            "finetune.task=question_answering",
            f"finetune.pretrained={tiny_pretrained}",
            f"finetune.train_path={tmp_path}/train.json",
            "finetune.eval_path=s3://qa-eval/dev.jsonl",
            "finetune.max_seq_length=96",
            "finetune.max_query_length=32",
            "finetune.doc_stride=48",
            "tune.num_samples=2",
            "tune.scheduler=none",
            "tune.space={finetune.lr: [0.001, 0.0003], finetune.batch_size: 32, finetune.epochs: 1}",
        ]
    )
    out = run_finetune(config)
    assert sorted(os.listdir(out)) == [
        ".albert-ray.json",
        "best",
        "best.json",
        "config.yaml",
        "manifest.json",
        "null_odds.json",
        "predictions.json",
        "trials.csv",
    ]
    predictions = json.loads(Path(out, "predictions.json").read_text())
    null_odds = json.loads(Path(out, "null_odds.json").read_text())
    contexts = {e.id: e.context for e in held}
    assert set(predictions) == set(null_odds) == set(contexts)
    assert all(answer in contexts[qid] for qid, answer in predictions.items())

    best = json.loads(Path(out, "best.json").read_text())
    metrics = best["metrics"]
    golds = read_squad_golds(squad_file(held))
    official = squad_scores(golds, predictions)  # evaluate-v2.0.py dev.json predictions.json
    assert (metrics["exact"], metrics["f1"]) == (official["exact"], official["f1"])
    assert (metrics["HasAns_f1"], metrics["NoAns_f1"]) == (official["HasAns_f1"], official["NoAns_f1"])
    # ... --na-prob-file null_odds.json --na-prob-thresh <the recorded threshold>: the same figures
    thresholded = squad_scores(golds, predictions, null_odds, threshold=metrics["null_threshold"])
    assert (thresholded["exact"], thresholded["f1"]) == (metrics["exact"], metrics["f1"])
    trials = list(csv.DictReader(Path(out, "trials.csv").read_text().splitlines()))
    assert best["metric"] == "f1" and best["value"] == metrics["f1"] == max(float(t["f1"]) for t in trials)
    assert best["eval_examples"] == len(held) and best["label_names"] is None

    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert manifest["task"] == "question_answering" and manifest["examples"]["version_2"] is True
    source, evaluation = manifest["examples"]["inputs"]
    assert (
        source["read"] == 203
        and source["usable"] == 200
        and source["unanswerable"] == sum(not e.answers for e in train)
    )
    assert source["rejected"] == {"answer_start_mismatch": 1, "missing_field": 1, "malformed_answers": 1}
    assert all(f"{tmp_path}/train.json" in line for lines in source["rejection_examples"].values() for line in lines)
    assert evaluation["source"] == "s3://qa-eval/dev.jsonl" and evaluation["usable"] == len(held)
    assert manifest["examples"]["eval"]["features"] > len(held)  # long contexts: several windows
    assert manifest["fingerprint"] == stage_fingerprint(config, "finetune") and is_up_to_date(config, "finetune")

    exported = json.loads(Path(out, "best", "config.json").read_text())
    assert exported["architectures"] == ["AlbertForQuestionAnswering"]
    model, info = transformers.AlbertForQuestionAnswering.from_pretrained(f"{out}/best", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert "f1" in capsys.readouterr().out

    # the export says how it is applied (issue #44): the windows, the answer search and the
    # no-answer threshold its evaluation chose; its tokenizer feeds the question and context's
    # segment ids, as the README loads it
    assert read_usage(exported, f"{out}/best") == ModelUsage(
        "question_answering",
        96,
        {"max_query_length": 32, "doc_stride": 48, "n_best_size": 20, "max_answer_length": 30}
        | {"null_threshold": metrics["null_threshold"]},
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(f"{out}/best")
    question, context = held[0].question, held[0].context[:300]
    encoded = tokenizer(question, context)
    expected = PairTokenizer(f"{out}/best").encode(question, context, 1000)
    assert (encoded["input_ids"], encoded["token_type_ids"]) == expected and tokenizer.model_max_length == 96


def test_a_qa_config_is_checked_before_any_work():
    from pipelines.errors import ConfigError
    from pipelines.finetuning.families.checks import check_config

    with pytest.raises(ConfigError, match="tune.metric=accuracy: not a question_answering metric"):
        check_config(load_config(overrides=["finetune.task=question_answering", "tune.metric=accuracy"]))
    with pytest.raises(ConfigError, match="finetune.max_query_length=64: leaves no context"):
        check_config(load_config(overrides=["finetune.task=question_answering", "finetune.max_seq_length=64"]))
    with pytest.raises(ConfigError, match="finetune.doc_stride=0: must be >= 1"):
        load_config(overrides=["finetune.task=question_answering", "finetune.doc_stride=0"])
    root = Path(__file__).resolve().parents[2] / "configs"
    demo, default = load_config(str(root / "qa-demo.yaml")), load_config(str(root / "default.yaml"))
    assert demo.finetune.task == "question_answering" and demo.finetune.train_path is None
    # its pretraining is make run's
    assert [getattr(demo, s) for s in ("corpus", "vocab", "data", "model", "train")] == [
        getattr(default, s) for s in ("corpus", "vocab", "data", "model", "train")
    ]
