"""An export is applied by its task family: the family its config.json records, else the one its head
and transformers' problem_type say (an export fine-tuned elsewhere, or before the record); an export
of no family, or of one without inference, is refused by name. A multiple-choice export predicts
as its fine-tuning evaluates, whatever the rows around a question in a batch (other numbers of
choices included)."""

import dataclasses
import json

import numpy as np
import pytest

from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.families.multiple_choice.training import MULTIPLE_CHOICE, encode_question
from pipelines.finetuning.family import EncodedTask
from pipelines.finetuning.loop import predict
from pipelines.inference.predictor import Predictor, family_of, inference_of

SEQUENCE = "AlbertForSequenceClassification"


def test_the_family_is_the_one_the_folder_records_else_the_one_its_head_and_problem_type_say():
    def named(config: dict) -> str:
        return family_of(config, "m").name

    recorded = {"task": "regression", "max_seq_length": 16}
    assert (
        named({"architectures": [SEQUENCE], "albert_ray": recorded, "id2label": {"0": "a", "1": "b"}}) == "regression"
    )
    labels = {str(i): n for i, n in enumerate("abc")}
    assert named({"architectures": [SEQUENCE], "id2label": labels}) == "classification"
    assert named({"architectures": [SEQUENCE], "id2label": labels, "problem_type": "multi_label_classification"}) == (
        "multi_label"
    )
    assert named({"architectures": [SEQUENCE], "id2label": {"0": "LABEL_0"}}) == "regression"
    assert named({"architectures": [SEQUENCE], "num_labels": 1, "id2label": labels}) == "regression"
    assert named({"architectures": [SEQUENCE], "problem_type": "regression", "id2label": labels}) == "regression"
    assert named({"architectures": [SEQUENCE]}) == "classification"
    assert named({"architectures": ["AlbertForMultipleChoice"]}) == "multiple_choice"
    for config, message in [
        ({"architectures": ["AlbertForPreTraining"]}, "m: an export of AlbertForPreTraining; predict serves the task "),
        ({}, "m: an export of ?; predict serves"),
        (
            {"architectures": [SEQUENCE], "albert_ray": {"task": "multiple_choice", "max_seq_length": 16}},
            "m: config.json's albert_ray records task 'multiple_choice' for its AlbertForSequenceClassification head",
        ),
        (
            {"architectures": [SEQUENCE], "albert_ray": {"task": "summarization", "max_seq_length": 16}},
            "m: config.json's albert_ray records task 'summarization'",
        ),
    ]:
        with pytest.raises(BadInput) as raised:
            family_of(config, "m")
        assert str(raised.value).startswith(message)
    without = dataclasses.replace(FAMILIES["multiple_choice"], inference=None)
    with pytest.raises(BadInput, match="^m: a multiple_choice export \\(AlbertForMultipleChoice\\); predict and serve"):
        inference_of(without, "m")


def test_multiple_choice_predicts_as_its_fine_tuning_evaluates_whatever_the_batch(chooser):
    predictor = Predictor.load(chooser, batch_size=3, device="cpu")
    assert (predictor.family.name, predictor.use.max_seq_length) == ("multiple_choice", 24)
    endings = ["barks loudly.", "meows loudly.", "moos loudly.", "quacks loudly."]
    fours = [
        {"question": f"The {animal}", "context": "It is morning on the farm.", "choices": endings[i:] + endings[:i]}
        for i, animal in enumerate(["dog", "cat", "cow", "duck", "hen"])
    ]
    others = [{"question": "The dog", "choices": endings[:2]}, {"context": "A long day.", "choices": endings[1:]}]
    rows = [fours[0], others[0], fours[1], fours[2], others[1], fours[3], fours[4]]
    got = predictor.predict(rows)

    # the fine-tuning's evaluation of the four-choice questions (stripped as its reader keeps them)
    features = [encode_question(predictor.use.tokenizer, r["context"], r["question"], r["choices"], 24) for r in fours]
    task = EncodedTask([], np.zeros(0), features, np.zeros(len(fours), np.int64), reference=list("abcde"))
    scores = predict(predictor.model, features, 2, predictor.use.tokenizer.pad_id, collate_fn=MULTIPLE_CHOICE.collate)
    evaluated = MULTIPLE_CHOICE.evaluate(FinetuneSection(task="multiple_choice"), task, scores)
    lines = [json.loads(line) for line in evaluated.files["predictions.jsonl"].splitlines()]
    ours = [got[rows.index(r)] for r in fours]
    assert [o["prediction"] for o in ours] == [line["prediction"] for line in lines]
    assert len({o["prediction"] for o in ours}) > 1  # the scores tell the choices apart
    for row, out in zip(rows, got):
        alone = predictor.predict([row])[0]
        assert len(out["probabilities"]) == len(row["choices"]) and sum(out["probabilities"]) == pytest.approx(1)
        assert out["prediction"] == alone["prediction"] == int(np.argmax(out["probabilities"]))
        np.testing.assert_allclose(out["probabilities"], alone["probabilities"], atol=1e-5)


def test_a_token_budget_changes_how_rows_are_batched_not_their_answers(chooser):
    """Questions of two and three choices and a long four-choice one in batches of up to 8 rows, under
    a budget of 60 padded tokens (the long question runs alone): the same answers as unbounded
    batches, to the 1e-5 that a question's padding to another width makes (as batched vs alone)."""
    rows = [
        {"question": f"The {animal}", "choices": ["barks.", "meows.", "moos loudly in the morning."][: 2 + i % 2]}
        for i, animal in enumerate(["dog", "cat", "cow", "duck", "hen", "pig"])
    ]
    rows += [{"question": "The dog", "context": "It is a long morning on the farm.", "choices": ["a", "b", "c", "d"]}]
    unbounded = Predictor.load(chooser, batch_size=8, device="cpu").predict(rows)
    bounded = Predictor.load(chooser, batch_size=8, device="cpu", max_batch_tokens=60).predict(rows)
    for a, b in zip(bounded, unbounded):
        assert a["prediction"] == b["prediction"]
        np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=1e-5)


def test_precision_is_bf16_on_a_gpu_fp32_on_a_cpu_unless_asked(chooser):
    """predict.precision / serve --precision: auto resolves by device; the weights are cast to it and
    bf16's answers are fp32's but for its rounding."""
    import torch

    from pipelines.inference.predictor import model_dtype

    cpu = torch.device("cpu")
    assert model_dtype("auto", cpu) == torch.float32 and model_dtype("bf16", cpu) == torch.bfloat16
    assert model_dtype("fp32", torch.device("cuda")) == torch.float32
    with pytest.raises(BadInput, match="precision: 'fp16' is not one of auto, bf16, fp32"):
        model_dtype("fp16", cpu)
    rows = [
        {"question": "The dog", "choices": ["barks.", "meows.", "moos."]},
        {"question": "A cat", "choices": ["a", "b"]},
    ]
    fp32 = Predictor.load(chooser, device="cpu")
    bf16 = Predictor.load(chooser, device="cpu", precision="bf16")
    assert {p.dtype for p in fp32.model.parameters()} == {torch.float32}
    assert {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    for a, b in zip(fp32.predict(rows), bf16.predict(rows)):
        np.testing.assert_allclose(a["probabilities"], b["probabilities"], atol=0.05)
