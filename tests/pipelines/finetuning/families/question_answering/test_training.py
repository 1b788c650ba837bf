"""The question-answering family on hand-written SQuAD files (v1.1 and v2.0 layouts): its features,
its account of every question, and its evaluation of forced logits (an answer only in the last of
several windows is found there; v2's no-answer threshold)."""

import json
import math

import numpy as np
import pytest

from pipelines.config import FinetuneSection
from pipelines.finetuning.families.question_answering.features import QAExample
from pipelines.finetuning.families.question_answering.training import (
    QUESTION_ANSWERING,
    clear_threshold,
    split_by_context,
)
from pipelines.finetuning.tokenizer import PairTokenizer

LONG = " ".join(f"Sentence {i} says little about anything at all." for i in range(12)) + " The key is Maria Lopez."
SHORT = "The match in Leeds ended 3-1 after extra time."


def squad(questions, version="1.1"):
    paragraphs = {}
    for qid, question, context, answers in questions:
        qa = {
            "id": qid,
            "question": question,
            "answers": [{"text": a, "answer_start": context.index(a)} for a in answers],
        }
        if version.lstrip("v").startswith("2"):
            qa["is_impossible"] = not answers
        paragraphs.setdefault(context, []).append(qa)
    return {"version": version, "data": [{"paragraphs": [{"context": c, "qas": q} for c, q in paragraphs.items()]}]}


@pytest.fixture
def qa_files(tmp_path):
    train = squad([("t1", "Who is the key?", LONG, ["Maria Lopez"]), ("t2", "Where was it?", SHORT, ["Leeds"])])
    train["data"][0]["paragraphs"][1]["qas"].append(
        {"id": "bad", "question": "Score?", "answers": [{"text": "4-0", "answer_start": 3}]}
    )
    (tmp_path / "train.json").write_text(json.dumps(train))
    (tmp_path / "dev.json").write_text(json.dumps(squad([("d1", "Who is the key?", LONG, ["Maria Lopez"])])))
    dev2 = squad([("d1", "Who is the key?", LONG, ["Maria Lopez"]), ("d2", "Who won?", SHORT, [])], "v2.0")
    (tmp_path / "dev2.json").write_text(json.dumps(dev2))
    return tmp_path


def qa_config(files, eval_name):
    return FinetuneSection(
        task="question_answering",
        train_path=f"{files}/train.json",
        eval_path=f"{files}/{eval_name}",
        max_seq_length=48,
        max_query_length=16,
        doc_stride=16,
    )


def forced_scores(task, no_answer=()):
    """Logits that point at each eval feature's target (10 + 10), and at [CLS] for `no_answer` questions."""
    width = max(len(ids) for ids, _ in task.eval)
    scores = np.zeros((len(task.eval), width, 2), np.float32)
    for i, ((start, end), window) in enumerate(zip(task.eval_targets, task.reference.windows)):
        if window.example_id in no_answer:
            scores[i, 0] = 10.0
        elif start:
            scores[i, start, 0] = scores[i, end, 1] = 10.0
    return scores


def test_a_squad_file_becomes_windows_and_every_question_is_counted(qa_files, tiny_pretrained):
    cfg = qa_config(qa_files, "dev.json")
    task = QUESTION_ANSWERING.encode(cfg, PairTokenizer(tiny_pretrained))
    train, dev = task.accounting["inputs"]
    assert (train["read"], train["usable"], train["rejected"]) == (3, 2, {"answer_start_mismatch": 1})
    assert (
        "train.json data[0].paragraphs[1].qas[1] (id 'bad')" in train["rejection_examples"]["answer_start_mismatch"][0]
    )
    assert (dev["usable"], task.accounting["version_2"], task.eval_examples) == (1, False, 1)
    assert task.accounting["train"]["features"] == len(task.train) == len(task.train_targets)
    windows = [w for w in task.reference.windows if w.example_id == "d1"]
    assert len(windows) >= 3 and len(task.eval) == len(windows)
    # the answer lies only in the last window: only its target is the answer, the others point at [CLS]
    assert [bool(s) for s, _ in task.eval_targets] == [False] * (len(windows) - 1) + [True]
    assert all(len(ids) <= 48 for ids, _ in task.train + task.eval)


def test_forced_logits_answer_from_the_last_window_with_full_scores(qa_files, tiny_pretrained):
    cfg = qa_config(qa_files, "dev.json")
    task = QUESTION_ANSWERING.encode(cfg, PairTokenizer(tiny_pretrained))
    evaluation = QUESTION_ANSWERING.evaluate(cfg, task, forced_scores(task))
    assert json.loads(evaluation.files["predictions.json"]) == {"d1": "Maria Lopez"}
    assert set(evaluation.files) == {"predictions.json"}  # v1.1: no null odds
    assert evaluation.metrics["exact"] == evaluation.metrics["f1"] == 100.0
    assert np.isfinite(evaluation.metrics["eval_loss"]) and "null_threshold" not in evaluation.metrics
    wrong = forced_scores(task)[:, ::-1]  # the logits at the other end of each window
    assert QUESTION_ANSWERING.evaluate(cfg, task, wrong.copy()).metrics["exact"] == 0.0


def test_squad_v2_chooses_the_no_answer_threshold_and_writes_null_odds(qa_files, tiny_pretrained):
    cfg = qa_config(qa_files, "dev2.json")
    task = QUESTION_ANSWERING.encode(cfg, PairTokenizer(tiny_pretrained))
    assert task.accounting["version_2"] is True
    evaluation = QUESTION_ANSWERING.evaluate(cfg, task, forced_scores(task, no_answer={"d2"}))
    predictions = json.loads(evaluation.files["predictions.json"])
    null_odds = json.loads(evaluation.files["null_odds.json"])
    assert predictions == {"d1": "Maria Lopez", "d2": ""}
    # clear of both questions' odds: a question at the threshold itself would be answered or not by
    # the last bits of its logits, which onnxruntime and transformers' float32 sums round otherwise
    assert null_odds["d1"] < evaluation.metrics["null_threshold"] < null_odds["d2"]
    metrics = evaluation.metrics
    assert metrics["f1"] == metrics["HasAns_f1"] == metrics["NoAns_f1"] == 100.0


def test_a_held_out_split_keeps_each_context_on_one_side():
    examples = [QAExample(f"q{i}", "Who?", f"context {i % 5}", (("context", 0),)) for i in range(20)]
    train_idx, held_idx = split_by_context(examples, 0.4, seed=3)
    train, held = [examples[i] for i in train_idx], [examples[i] for i in held_idx]
    assert len({e.context for e in held}) == 2 and not {e.context for e in train} & {e.context for e in held}
    assert sorted(train_idx + held_idx) == list(range(20))
    assert split_by_context(examples, 0.4, seed=3) == (train_idx, held_idx)


def test_the_recorded_threshold_is_clear_of_every_eval_question():
    odds = [-2.0, 0.5, 1.5, 3.0, math.inf]
    assert clear_threshold(0.5, odds) == 1.0  # halfway to the next odds: the same questions answered
    assert clear_threshold(3.0, odds) == 4.0  # none above (but no span at all): one logit up
    assert clear_threshold(0.0, odds) == 0.0  # the script's "answer none" default is no question's
