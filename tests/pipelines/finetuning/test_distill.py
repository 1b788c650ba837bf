"""Depth distillation in a trial, without Ray: the student starts as the fine-tuned teacher's own
weights at fewer layers, learns its teacher's outputs, and exports as a standard transformers ALBERT
that gives predict's answers; the objectives' wiring (packed targets, the head at every depth,
hidden-state matching) against their parts."""

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from albert_model.depths import depth_logits, step_states
from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertForSequenceClassification
from pipelines.config import DistillSection, FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.distill import Teacher, build_student, packed_targets, teacher_scores
from pipelines.finetuning.distill_losses import depth_weighted_sum, hidden_mse_sum, mixed_loss, softmax_kl_sum
from pipelines.finetuning.families.classification.training import CLASSIFICATION
from pipelines.finetuning.family import EncodedTask
from pipelines.finetuning.loop import collate
from pipelines.finetuning.objective import EveryDepth, HiddenMatched, build_objective
from pipelines.finetuning.trial import TrialData, fit_trial
from pipelines.inference.predictor import Predictor
from tests.pipelines.finetuning.test_step import toy_trial_data

TEACHER_CFG = FinetuneSection(epochs=2, batch_size=4, lr=1e-3)


def train(cfg, data, directory, root):
    reports = []
    fit_trial(cfg, data, directory, str(root), lambda metrics, checkpoint: reports.append((metrics, checkpoint)))
    return reports


@pytest.fixture(scope="module")
def teacher(tiny_pretrained, tmp_path_factory):
    """A 4-layer classifier fine-tuned on the toy task: its last epoch's export."""
    return train(TEACHER_CFG, toy_trial_data(), tiny_pretrained, tmp_path_factory.mktemp("teacher"))[-1][1]


def distilled(teacher, settings, cfg=TEACHER_CFG):
    data = toy_trial_data()
    logits = teacher_scores(cfg, CLASSIFICATION, data.encoded.train, data.pad_id, teacher)
    data.teacher = Teacher(logits, settings.student_layers(4), 4, settings)
    return data


def test_the_student_is_the_teachers_weights_applied_fewer_times(teacher):
    student = build_student(teacher, AlbertForSequenceClassification, 2, 0.1)
    reference = load_hf_pretrained(teacher, AlbertForSequenceClassification).state_dict()
    assert student.config.num_hidden_layers == 2 and student.state_dict().keys() == reference.keys()
    assert all(torch.equal(v, reference[k]) for k, v in student.state_dict().items())  # no new parameter


def test_packed_targets_carry_the_hard_targets_and_the_teachers_logits_of_each_example():
    for targets, flat in ((np.array([0, 2, 1]), True), (np.array([[1, 0], [0, 1], [1, 1]]), False)):
        encoded = [([2, 3], [0, 0])] * 3
        task = EncodedTask(encoded, targets, [], np.array([]), num_labels=2)
        logits = np.arange(6, dtype=np.float32).reshape(3, 2)
        packed, packing = packed_targets(task, Teacher(logits, 1, 2, DistillSection(layers=1)), False, 8)
        assert packing.flat == flat and packing.soft_shape == (2,)
        hard, soft = packing.unpack(packed[[2, 0]], torch.long)  # a batch: rows 2 and 0
        assert torch.equal(hard, torch.as_tensor(targets[[2, 0]])) and hard.dtype == torch.long
        assert torch.equal(soft, torch.tensor(logits[[2, 0]]))


KL_ONLY = DistillSection(layers="half", alpha=0.0, temperature=2.0)


@pytest.fixture(scope="module")
def student(teacher, tmp_path_factory):
    """The half-depth student of `teacher` trained against its outputs alone (alpha=0: the loss is
    the KL to the teacher), and the data it was trained on."""
    data = distilled(teacher, KL_ONLY)
    return train(TEACHER_CFG, data, teacher, tmp_path_factory.mktemp("student"))[-1][1], data


def test_a_distilling_trial_learns_its_teachers_outputs(teacher, student):
    """Training lowers the KL to the teacher from where the half-depth student starts."""
    checkpoint, data = student
    batch = collate(data.encoded.train, range(16), 0)
    target = torch.tensor(data.teacher.logits)
    start = build_student(teacher, AlbertForSequenceClassification, 2, 0.1).eval()
    trained = load_hf_pretrained(checkpoint, AlbertForSequenceClassification).eval()
    with torch.no_grad():
        before = softmax_kl_sum(start(**batch), target, 2.0).item()
        after = softmax_kl_sum(trained(**batch), target, 2.0).item()
    assert trained.config.num_hidden_layers == 2
    assert after < before


def test_the_student_loads_in_transformers_and_gives_predicts_answers(student):
    checkpoint = student[0]
    rows = [{"text": "Shares rose in the market today."}, {"text": "The team won the cup final."}]
    model = AutoModelForSequenceClassification.from_pretrained(checkpoint).eval()
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    assert model.config.num_hidden_layers == 2
    with torch.no_grad():
        expected = [
            model(**tokenizer(row["text"], truncation=True, return_tensors="pt")).logits.softmax(-1)[0].tolist()
            for row in rows
        ]
    found = Predictor.load(checkpoint, device="cpu").predict(rows)
    np.testing.assert_allclose([f["probabilities"] for f in found], expected, atol=1e-5)
    assert [f["prediction"] for f in found] == [model.config.id2label[int(np.argmax(e))] for e in expected]


def test_exit_heads_train_every_depths_head_with_pabees_weighted_loss(tiny_pretrained):
    data = toy_trial_data()
    cfg = FinetuneSection(exit_heads=True, classifier_dropout=0.0)
    objective = build_objective(cfg, CLASSIFICATION, data.encoded, tiny_pretrained, None)
    assert isinstance(objective.trained, EveryDepth) and objective.trained.model is objective.model
    batch = collate(data.encoded.train, range(6), 0, objective.targets)
    targets = batch.pop("labels")
    outputs = objective.trained(**batch)
    assert outputs.shape == (4, 6, 2)
    expected = depth_weighted_sum([CLASSIFICATION.loss_sum(outputs[d], targets) for d in range(4)])
    assert objective.loss_of(outputs, targets).item() == pytest.approx(expected.item())


def test_hidden_matching_adds_the_weighted_state_error_against_a_frozen_teacher(teacher):
    settings = DistillSection(layers=2, alpha=0.3, temperature=3.0, hidden_weight=0.5)
    data = distilled(teacher, settings)
    cfg = FinetuneSection(classifier_dropout=0.0)
    objective = build_objective(cfg, CLASSIFICATION, data.encoded, teacher, data.teacher)
    assert isinstance(objective.trained, HiddenMatched) and objective.trained.pairs == [2, 4]
    objective.trained.train()
    assert not objective.trained.teacher.training  # the targets without dropout
    batch = collate(data.encoded.train, range(6), 0, objective.targets)
    targets = batch.pop("labels")
    logits, hidden = objective.trained(**batch)
    reference = load_hf_pretrained(teacher, AlbertForSequenceClassification).eval()
    with torch.no_grad():
        student_states = step_states(objective.model.albert, **batch)
        teacher_states = step_states(reference.albert, **batch)
    assert hidden.item() == pytest.approx(
        hidden_mse_sum(student_states, [teacher_states[1], teacher_states[3]], batch["attention_mask"]).item(), rel=1e-5
    )
    hard, soft = targets[:, 0].long(), targets[:, 1:]
    soft_loss = CLASSIFICATION.soft_loss_sum(logits, soft, 3.0, hard)
    mixed = mixed_loss(CLASSIFICATION.loss_sum(logits, hard), soft_loss, 0.3)
    loss = objective.loss_of((logits, hidden), targets)
    assert loss.item() == pytest.approx((mixed + 0.5 * hidden).item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in objective.trained.teacher.parameters())
    assert objective.model.albert.encoder.albert_layer_groups[0].albert_layers[0].ffn.weight.grad is not None


def test_trial_data_without_a_teacher_fine_tunes_as_before():
    assert TrialData("classification", toy_trial_data().encoded, 0, {}).teacher is None


ROWS = [{"text": t} for t in ("Shares rose today.", "The team won the cup.", "A new phone.", "Ministers met.")]


def test_predict_exits_early_under_patience_and_says_at_which_depth(teacher):
    full = Predictor.load(teacher, device="cpu").predict(ROWS)
    never = Predictor.load(teacher, device="cpu", exit_patience=10).predict(ROWS)  # more than the 4 depths
    assert [r["exit_depth"] for r in never] == [4] * 4 and "exit_depth" not in full[0]
    np.testing.assert_allclose([r["probabilities"] for r in never], [r["probabilities"] for r in full], atol=1e-5)
    eager = Predictor.load(teacher, device="cpu", exit_patience=1)
    assert eager.output == {**eager.inference.output, "exit_depth": pa.int32()}
    model = load_hf_pretrained(teacher, AlbertForSequenceClassification).eval()
    for row, answer in zip(ROWS, eager.predict(ROWS)):
        ids, types = eager.use.tokenizer.encode(row["text"], None, eager.use.max_seq_length)
        with torch.no_grad():
            depths = depth_logits(model, torch.tensor([ids]), torch.tensor([types]))[:, 0]
        predicted = depths.argmax(-1).tolist()
        expected = next((d + 1 for d in range(1, 4) if predicted[d] == predicted[d - 1]), 4)
        assert answer["exit_depth"] == expected
        np.testing.assert_allclose(answer["probabilities"], depths[expected - 1].softmax(-1).tolist(), atol=1e-5)


def test_early_exit_is_refused_where_a_prediction_has_no_argmax():
    from pipelines.finetuning.families.regression.inference import INFERENCE

    with pytest.raises(BadInput, match="early exit needs classes"):
        INFERENCE.exit_rule(1, None)


def test_the_predict_stage_writes_each_rows_exit_depth_and_their_histogram(teacher, tmp_path):
    import pyarrow.parquet as pq

    from pipelines.config import load_config
    from pipelines.stages.predict import run_predict

    (tmp_path / "rows.csv").write_text("text\n" + "\n".join(r["text"] for r in ROWS) + "\n")
    overrides = [f"run_dir={tmp_path}/run", f"predict.model={teacher}", f"predict.input={tmp_path}/rows.csv"]
    out = run_predict(load_config(overrides=[*overrides, "predict.exit_patience=1"]))  # in this process: no Ray
    table = pq.read_table(f"{out}/predictions").to_pylist()
    expected = Predictor.load(teacher, device="cpu", exit_patience=1).predict(ROWS)
    assert [r["exit_depth"] for r in table] == [e["exit_depth"] for e in expected]
    manifest = json.loads(Path(out, "manifest.json").read_text())
    assert sum(manifest["exit_depths"].values()) == len(ROWS)
    assert manifest["exit_depths"] == {str(d): n for d, n in sorted(Counter(r["exit_depth"] for r in table).items())}


def test_the_tradeoff_scores_each_way_of_answering_as_its_own_predictions_do(teacher):
    """finetuning/tradeoff.measure: per arm the family's metric of that arm's own eval scores, the
    mean depth its rows were answered at, and a rate; the student is the teacher applied twice."""
    from albert_model.depths import ExitRule, early_exit
    from pipelines.finetuning.tradeoff import Arm, measure

    data = toy_trial_data()
    model = load_hf_pretrained(teacher, AlbertForSequenceClassification).eval()
    student = build_student(teacher, AlbertForSequenceClassification, 2, 0.0).eval()
    rule = ExitRule(patience=1)
    arms = [Arm("teacher", model, 4), Arm("student", student, 2), Arm("exit, patience 1", model, 4, rule)]
    found = measure(TEACHER_CFG, CLASSIFICATION, data.encoded, data.pad_id, arms, rounds=1)
    assert [f["name"] for f in found] == ["teacher", "student", "exit, patience 1"]
    for arm, got in zip(arms[:2], found):
        scores = teacher_scores(TEACHER_CFG, CLASSIFICATION, data.encoded.eval, data.pad_id, teacher)
        if arm.name == "student":
            batch = collate(data.encoded.eval, range(len(data.encoded.eval)), data.pad_id)
            with torch.no_grad():
                scores = CLASSIFICATION.scores(student(**batch)).numpy()
        assert got["metrics"] == pytest.approx(CLASSIFICATION.evaluate(TEACHER_CFG, data.encoded, scores).metrics)
        assert got["mean_depth"] == arm.layers and got["rows_per_s"] > 0 and got["exit_rule"] is None
    batch = collate(data.encoded.eval, range(len(data.encoded.eval)), data.pad_id)
    logits, depths = early_exit(model, rule, **batch)
    exited = found[2]
    assert exited["exit_rule"] == {"patience": 1, "entropy": None}
    assert exited["mean_depth"] == pytest.approx(depths.float().mean().item())
    expected = CLASSIFICATION.evaluate(TEACHER_CFG, data.encoded, logits.numpy()).metrics
    assert exited["metrics"] == pytest.approx(expected)
