"""Depth distillation of the families whose outputs have a position axis (token classification: a
tag per token; question answering: a start and an end per position), without Ray: the teacher's
logits packed beside the hard targets (by position, cut with the batch; or flattened), -inf past
each feature's own tokens, and a student's loss on a batch against the teacher's logits of each
feature computed alone, the soft-target part by hand (numpy) over the positions the family's loss
counts; with hidden-state matching through the head at every position."""

from typing import Any, NamedTuple

import numpy as np
import pytest
import torch

from albert_model import AlbertConfig, AlbertForQuestionAnswering, AlbertForTokenClassification
from albert_model.hf import load_hf_pretrained, save_hf_pretrained
from pipelines.config import DistillSection, FinetuneSection
from pipelines.finetuning.distill import Teacher, packed_targets, teacher_scores
from pipelines.finetuning.distill_losses import mixed_loss
from pipelines.finetuning.families.question_answering.training import QUESTION_ANSWERING
from pipelines.finetuning.families.token_classification.training import IGNORED, TOKEN_CLASSIFICATION
from pipelines.finetuning.family import EncodedTask
from pipelines.finetuning.objective import HiddenMatched, build_objective
from tests.conftest import VOCAB_SIZE

WIDTH = 8
"""finetune.max_seq_length of these tasks."""
FEATURES = [([2, 11, 12, 13, 14, 3], [0] * 6), ([2, 21, 22, 3], [0] * 4), ([2, 31, 32, 33, 3], [0, 0, 1, 1, 1])]
TAGS = np.full((3, WIDTH), IGNORED)
TAGS[0, [1, 3]], TAGS[1, [1, 2]], TAGS[2, [1]] = [1, 0], [2, 2], [0]  # word starts; other pieces untagged
SPANS = np.array([[3, 4], [0, 0], [2, 3]])  # (start, end); (0, 0): no answer in the window


def task_of(targets: np.ndarray) -> EncodedTask:
    return EncodedTask(FEATURES, targets, [], np.zeros((0,)), num_labels=3)


def test_token_targets_pack_by_position_and_are_cut_with_the_batch():
    logits = np.random.default_rng(0).normal(size=(3, 6, 3)).astype(np.float32)  # the widest feature's 6
    packed, packing = packed_targets(task_of(TAGS), Teacher(logits, 2, 4, DistillSection(layers=2)), True, WIDTH)
    assert packed.shape == (3, WIDTH, 1 + 3)
    batch = TOKEN_CLASSIFICATION.collate(FEATURES, [1, 2], 0, packed)  # the batch's width: 5
    hard, soft = packing.unpack(batch["labels"], torch.long)
    assert batch["input_ids"].shape == (2, 5) and hard.dtype == torch.long
    assert torch.equal(hard, torch.as_tensor(TAGS[[1, 2], :5]))
    assert torch.equal(soft[0, :4], torch.as_tensor(logits[1, :4])) and torch.equal(
        soft[1], torch.as_tensor(logits[2, :5])
    )
    assert torch.isneginf(soft[0, 4]).all()  # past feature 1's four tokens the teacher says nothing


def test_qa_targets_pack_flattened_with_the_teachers_window_logits():
    logits = np.random.default_rng(1).normal(size=(3, 6, 2)).astype(np.float32)
    packed, packing = packed_targets(task_of(SPANS), Teacher(logits, 2, 4, DistillSection(layers=2)), False, WIDTH)
    assert packed.shape == (3, 2 + WIDTH * 2)
    hard, soft = packing.unpack(QUESTION_ANSWERING.collate(FEATURES, [2, 0], 0, packed)["labels"], torch.long)
    assert torch.equal(hard, torch.as_tensor(SPANS[[2, 0]])) and soft.shape == (2, WIDTH, 2)
    assert torch.equal(soft[0, :5], torch.as_tensor(logits[2, :5])) and torch.isneginf(soft[0, 5:]).all()
    assert torch.equal(soft[1, :6], torch.as_tensor(logits[0])) and torch.isneginf(soft[1, 6:]).all()


def kl_by_hand(student: np.ndarray, teacher: np.ndarray, t: float) -> float:
    """T^2 * KL(softmax(teacher / T) || softmax(student / T)) of two logit vectors, in float64."""

    def log_softmax(x):
        x = np.asarray(x, np.float64) / t
        return x - x.max() - np.log(np.exp(x - x.max()).sum())

    q, s = log_softmax(teacher), log_softmax(student)
    return float((np.exp(q) * (q - s)).sum() * t * t)


def saved_teacher(head, tiny_pretrained, folder) -> str:
    """A random 4-layer export of `head` (its logits spread) on the tiny vocabulary."""
    torch.manual_seed(0)
    model = head(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE, num_labels=3)).eval()
    with torch.no_grad():
        for p in (model.classifier if head is AlbertForTokenClassification else model.qa_outputs).parameters():
            p.mul_(50)
    return str(save_hf_pretrained(model, folder, f"{tiny_pretrained}/spiece.model", max_seq_length=WIDTH))


def own_logits(model, feature) -> torch.Tensor:
    """The teacher's logits of one feature alone (no batch, no padding): [S, labels], or [S, 2]."""
    ids, types = (torch.tensor([x]) for x in feature)
    with torch.no_grad():
        out = model(ids, types)
    return out[0] if isinstance(out, torch.Tensor) else torch.stack([out.start_logits[0], out.end_logits[0]], -1)


class StudentStep(NamedTuple):
    """A half-depth student's objective on its teacher's logits, and one forward of it in eval mode
    over the first three features: the student's outputs, its hidden-state loss and the mixed loss."""

    objective: Any
    batch: dict[str, torch.Tensor]
    packed: torch.Tensor
    outputs: torch.Tensor
    hidden: torch.Tensor
    loss: torch.Tensor


def student_step(cfg, family, task, features, folder, logits) -> StudentStep:
    """build_objective's HiddenMatched student (2 of the teacher's 4 depths; alpha 0.3, temperature 2,
    hidden weight 0.5) on `logits`, and its loss over features 0-2."""
    settings = DistillSection(layers=2, alpha=0.3, temperature=2.0, hidden_weight=0.5)
    objective = build_objective(cfg, family, task, folder, Teacher(logits, 2, 4, settings))
    assert isinstance(objective.trained, HiddenMatched) and objective.model.config.num_hidden_layers == 2
    objective.trained.eval()
    batch = family.collate(features, [0, 1, 2], 0, objective.targets)
    packed = batch.pop("labels")
    outputs, hidden = objective.trained(**batch)
    return StudentStep(objective, batch, packed, outputs, hidden, objective.loss_of((outputs, hidden), packed))


def assert_only_the_student_learns(step: StudentStep) -> None:
    """Backward from the loss: no gradient reaches the frozen teacher, finite ones reach the student."""
    step.loss.backward()
    assert all(p.grad is None for p in step.objective.trained.teacher.parameters())
    assert all(torch.isfinite(p.grad).all() for p in step.objective.model.parameters() if p.grad is not None)


@pytest.mark.parametrize(
    "family, head, targets",
    [
        (TOKEN_CLASSIFICATION, AlbertForTokenClassification, TAGS),
        (QUESTION_ANSWERING, AlbertForQuestionAnswering, SPANS),
    ],
)
def test_a_students_loss_is_the_hard_loss_mixed_with_the_kl_over_the_counted_positions_by_hand(
    family, head, targets, tiny_pretrained, tmp_path
):
    folder = saved_teacher(head, tiny_pretrained, tmp_path / "teacher")
    cfg = FinetuneSection(max_seq_length=WIDTH, classifier_dropout=0.0, eval_batch_size=2)
    task = task_of(targets)
    logits = teacher_scores(cfg, family, FEATURES, 0, folder)  # batched: zero-padded past a batch's width
    step = student_step(cfg, family, task, FEATURES, folder, logits)
    objective, batch, outputs, hidden, loss = step.objective, step.batch, step.outputs, step.hidden, step.loss

    teacher = load_hf_pretrained(folder, head).eval()
    soft = 0.0
    for i, feature in enumerate(FEATURES):
        mine = own_logits(objective.model, feature).numpy()
        theirs = own_logits(teacher, feature).numpy()
        if family is TOKEN_CLASSIFICATION:
            soft += sum(kl_by_hand(mine[p], theirs[p], 2.0) for p in np.flatnonzero(targets[i] != IGNORED))
        else:  # start and end, each over the window's own tokens
            soft += (kl_by_hand(mine[:, 0], theirs[:, 0], 2.0) + kl_by_hand(mine[:, 1], theirs[:, 1], 2.0)) / 2
    width = batch["input_ids"].shape[1]
    hard = family.loss_sum(outputs, torch.as_tensor(targets[:, :width] if family is TOKEN_CLASSIFICATION else targets))
    expected = mixed_loss(hard, torch.tensor(soft), 0.3) + 0.5 * hidden
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    assert_only_the_student_learns(step)
