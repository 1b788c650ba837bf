"""Depth distillation of multiple choice, without Ray: a student's loss on a batch of questions
(inputs [batch, choices, sequence]) against its teacher equals, by hand, the cross-entropy over the
choices mixed with the T²-scaled KL of the choices' softmaxes (each question's logits computed
alone, numpy), plus the hidden-state error of each choice's sequence alone, a question's mean over
its choices; the student's outputs are its own head's."""

import numpy as np
import pytest
import torch

from albert_model import AlbertConfig, AlbertForMultipleChoice
from albert_model.depths import step_states
from albert_model.hf import load_hf_pretrained, save_hf_pretrained
from pipelines.config import DistillSection, FinetuneSection
from pipelines.finetuning.distill import Teacher, packed_targets, teacher_scores
from pipelines.finetuning.distill_losses import depth_map, mixed_loss
from pipelines.finetuning.families.multiple_choice.training import MULTIPLE_CHOICE
from pipelines.finetuning.family import EncodedTask
from tests.conftest import VOCAB_SIZE

from .test_distill_positions import assert_only_the_student_learns, kl_by_hand, student_step

WIDTH = 8
QUESTIONS = [  # three choices each, of different lengths (padded in a batch)
    [([2, 11, 12, 3], [0] * 4), ([2, 11, 13, 14, 3], [0] * 5), ([2, 15, 3], [0] * 3)],
    [([2, 21, 3, 22, 3], [0, 0, 0, 1, 1]), ([2, 21, 3, 23, 24, 25, 3], [0, 0, 0, 1, 1, 1, 1]), ([2, 26, 3], [0] * 3)],
    [([2, 31, 32, 33, 3], [0] * 5), ([2, 34, 3], [0] * 3), ([2, 35, 36, 3], [0] * 4)],
]
RIGHT = np.array([0, 2, 1])


@pytest.fixture(scope="module")
def teacher_dir(tiny_pretrained, tmp_path_factory) -> str:
    """A random 4-layer multiple-choice export whose scores spread (no two choices tie)."""
    torch.manual_seed(0)
    model = AlbertForMultipleChoice(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(500)
    folder = tmp_path_factory.mktemp("choices") / "teacher"
    return str(save_hf_pretrained(model, folder, f"{tiny_pretrained}/spiece.model", max_seq_length=WIDTH))


def alone(model: AlbertForMultipleChoice, question) -> torch.Tensor:
    """A question's scores (its choices) with no other question and no padding beyond its own choices'."""
    batch = MULTIPLE_CHOICE.collate(QUESTIONS, [QUESTIONS.index(question)], 0)
    with torch.no_grad():
        return model(**batch)[0]


def hidden_by_hand(student, teacher) -> float:
    """Each choice's sequence alone: the mean squared state error at the mapped depths, a question's
    mean over its choices, summed over the questions."""
    pairs = depth_map(student.config.num_hidden_layers, teacher.config.num_hidden_layers)
    total = 0.0
    for question in QUESTIONS:
        per_choice = []
        for ids, types in question:
            inputs = (torch.tensor([ids]), torch.tensor([types]))
            with torch.no_grad():
                mine, theirs = step_states(student.albert, *inputs), step_states(teacher.albert, *inputs)
            per_choice.append(sum(float((mine[i] - theirs[j - 1]).pow(2).mean()) for i, j in enumerate(pairs)))
        total += np.mean(per_choice)
    return total


def objective_soft(packed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hard targets, the teacher's logits) of a batch's packed targets: the objective's unpacking."""
    task = EncodedTask(QUESTIONS, RIGHT, [], np.zeros((0,)), num_labels=1)
    _, packing = packed_targets(task, Teacher(np.zeros((3, 3), np.float32), 2, 4, DistillSection(layers=2)), False, 8)
    return packing.unpack(packed, torch.long)


def test_a_multiple_choice_students_loss_is_the_choices_kl_and_each_choices_states_by_hand(teacher_dir):
    cfg = FinetuneSection(task="multiple_choice", max_seq_length=WIDTH, classifier_dropout=0.0, eval_batch_size=2)
    task = EncodedTask(QUESTIONS, RIGHT, [], np.zeros((0,)), num_labels=1)
    logits = teacher_scores(cfg, MULTIPLE_CHOICE, QUESTIONS, 0, teacher_dir)
    assert logits.shape == (3, 3)
    step = student_step(cfg, MULTIPLE_CHOICE, task, QUESTIONS, teacher_dir, logits)
    objective, outputs, hidden, packed, loss = step.objective, step.outputs, step.hidden, step.packed, step.loss
    with torch.no_grad():
        assert torch.allclose(outputs, objective.model(**step.batch), atol=1e-5)  # the student's own head, (B, C)

    teacher = load_hf_pretrained(teacher_dir, AlbertForMultipleChoice).eval()
    soft = sum(kl_by_hand(alone(objective.model, q).numpy(), alone(teacher, q).numpy(), 2.0) for q in QUESTIONS)
    assert soft > 0.01  # the half-depth student does not answer as its teacher yet: the KL counts
    with torch.no_grad():  # the family's soft-target loss alone, on the teacher's logits as packed
        _, packed_soft = objective_soft(packed)
        family_soft = MULTIPLE_CHOICE.soft_loss_sum(outputs, packed_soft, 2.0, torch.as_tensor(RIGHT))
    assert family_soft.item() == pytest.approx(soft, rel=1e-4)
    assert hidden.item() == pytest.approx(hidden_by_hand(objective.model, teacher), rel=1e-4)
    hard = MULTIPLE_CHOICE.loss_sum(outputs, torch.as_tensor(RIGHT))
    expected = mixed_loss(hard, torch.tensor(soft), 0.3) + 0.5 * hidden
    assert loss.item() == pytest.approx(expected.item(), rel=1e-4)
    assert_only_the_student_learns(step)
