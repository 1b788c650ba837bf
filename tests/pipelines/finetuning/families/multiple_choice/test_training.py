"""The multiple-choice family (finetune.task=multiple_choice) on hand-written files in SWAG's, RACE's
and a plain jsonl layout: every question used or counted, run_swag's pairs, [B, choices, S]
batches, transformers' AlbertForMultipleChoice loss, accuracy and the predictions file."""

import json

import numpy as np
import pytest
import torch
import transformers

from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families.multiple_choice.reading import read_questions
from pipelines.finetuning.families.multiple_choice.training import encode_question
from pipelines.finetuning.tokenizer import PairTokenizer

from .test_reading import SWAG


def test_jsonl_rows_pair_the_context_with_question_and_choice_as_run_swag(tmp_path, tiny_pretrained):
    rows = [
        {
            "context": "The sun rises in the east.",
            "question": "Where does it rise?",
            "choices": ["east", "west"],
            "label": 0,
        },
        {"question": "Two plus two is", "choices": ["four", "five"], "label": "A"},  # no context
    ]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = read_questions(str(tmp_path / "mc.jsonl"), FinetuneSection(task="multiple_choice"))
    assert read.labels == [0, 0] and read.contexts == ["The sun rises in the east.", ""]
    assert read.ids == ["row 0", "row 1"]  # no id column
    tokenizer = PairTokenizer(tiny_pretrained)
    theirs = transformers.AutoTokenizer.from_pretrained(tiny_pretrained)
    with_context = encode_question(tokenizer, read.contexts[0], read.questions[0], read.choices[0], 32)
    assert [ids for ids, _ in with_context] == [
        theirs(rows[0]["context"], f"{rows[0]['question']} {c}", truncation=True, max_length=32)["input_ids"]
        for c in rows[0]["choices"]
    ]
    without = encode_question(tokenizer, "", read.questions[1], read.choices[1], 32)
    assert [ids for ids, _ in without] == [theirs(rows[1]["question"], c)["input_ids"] for c in rows[1]["choices"]]


def test_batches_loss_and_evaluation(tmp_path, tiny_pretrained):
    (tmp_path / "train.csv").write_text(SWAG)
    cfg = FinetuneSection(
        task="multiple_choice", train_path=str(tmp_path / "train.csv"), eval_path=str(tmp_path / "train.csv")
    )
    family = task_family("multiple_choice")
    task = family.encode(cfg, PairTokenizer(tiny_pretrained))
    assert len(task.train) == 2 and task.eval_targets.tolist() == [0, 1] and task.num_labels == 1
    batch = family.collate(task.train, [0, 1], 0, torch.as_tensor(task.train_targets))
    assert batch["input_ids"].shape[:2] == (2, 4) and batch["labels"].tolist() == [0, 1]
    assert batch["attention_mask"].shape == batch["input_ids"].shape
    model = transformers.AlbertForMultipleChoice.from_pretrained(tiny_pretrained).eval()
    labels = batch.pop("labels")
    with torch.no_grad():
        out = model(**batch, labels=labels)
    torch.testing.assert_close(family.loss_sum(out.logits, labels) / 2, out.loss, rtol=1e-6, atol=1e-7)

    scores = np.array([[3.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]], np.float32)  # the second is wrong
    evaluation = family.evaluate(cfg, task, scores)
    assert evaluation.metrics["accuracy"] == 0.5 and np.isfinite(evaluation.metrics["eval_loss"])
    lines = [json.loads(x) for x in evaluation.files["predictions.jsonl"].splitlines()]
    assert lines == [{"id": "0", "prediction": 0}, {"id": "3", "prediction": 0}]  # SWAG's fold-ind


def test_train_and_eval_files_with_other_choice_counts_are_refused(tmp_path, tiny_pretrained):
    (tmp_path / "train.csv").write_text(SWAG)
    (tmp_path / "eval.jsonl").write_text(json.dumps({"question": "q", "choices": ["a", "b"], "label": 0}) + "\n")
    cfg = FinetuneSection(
        task="multiple_choice", train_path=str(tmp_path / "train.csv"), eval_path=str(tmp_path / "eval.jsonl")
    )
    with pytest.raises(BadInput, match="has 4 choices per question and .*eval.jsonl 2"):
        task_family("multiple_choice").encode(cfg, PairTokenizer(tiny_pretrained))
