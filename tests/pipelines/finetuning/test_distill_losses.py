"""The distillation and early-exit losses against hand computations on a tiny batch."""

import math

import pytest
import torch

from pipelines.finetuning.distill_losses import (
    depth_map,
    depth_weighted_sum,
    hidden_mse_sum,
    mixed_loss,
    sigmoid_kl_sum,
    softmax_kl_sum,
    squared_error_sum,
)


def softmax(row, t):
    e = [math.exp(v / t) for v in row]
    return [v / sum(e) for v in e]


def test_softmax_kl_is_the_temperature_scaled_kl_of_the_teachers_distribution_by_hand():
    student, teacher, t = [[1.0, 0.0, -1.0], [0.5, 0.5, 2.0]], [[2.0, 0.0, 0.0], [0.0, 1.0, 1.0]], 2.0
    expected = 0.0
    for s_row, q_row in zip(student, teacher):
        s, q = softmax(s_row, t), softmax(q_row, t)
        expected += sum(qi * math.log(qi / si) for qi, si in zip(q, s))
    expected *= t * t
    found = softmax_kl_sum(torch.tensor(student), torch.tensor(teacher), t)
    assert found.item() == pytest.approx(expected, rel=1e-5)
    # the student that is its teacher has nothing to learn
    assert softmax_kl_sum(torch.tensor(teacher), torch.tensor(teacher), t).item() == pytest.approx(0.0, abs=1e-7)


def test_sigmoid_kl_is_each_classes_bernoulli_kl_averaged_over_the_classes_by_hand():
    student, teacher, t = [[1.0, -2.0]], [[0.0, 3.0]], 2.0
    expected = 0.0
    for s, q in zip(student[0], teacher[0]):
        ps, pq = 1 / (1 + math.exp(-s / t)), 1 / (1 + math.exp(-q / t))
        expected += pq * math.log(pq / ps) + (1 - pq) * math.log((1 - pq) / (1 - ps))
    expected = expected / 2 * t * t
    assert sigmoid_kl_sum(torch.tensor(student), torch.tensor(teacher), t).item() == pytest.approx(expected, rel=1e-5)


def test_squared_error_and_the_mix_with_the_hard_loss_by_hand():
    assert squared_error_sum(torch.tensor([[1.0], [3.0]]), torch.tensor([[0.0], [1.0]])).item() == 5.0
    hard, soft = torch.tensor(2.0), torch.tensor(10.0)
    assert mixed_loss(hard, soft, 0.25).item() == pytest.approx(0.25 * 2 + 0.75 * 10)
    assert mixed_loss(hard, soft, 1.0).item() == 2.0 and mixed_loss(hard, soft, 0.0).item() == 10.0


def test_depth_map_matches_student_step_i_to_teacher_step_2i_at_half_depth():
    assert depth_map(6, 12) == [2, 4, 6, 8, 10, 12]
    assert depth_map(2, 3) == [2, 3]  # round(1.5) is 2 (to even); the last steps always meet
    assert depth_map(4, 4) == [1, 2, 3, 4]


def test_hidden_mse_is_the_mean_over_real_tokens_and_units_summed_over_pairs_and_rows():
    # one example, two tokens (the second padding), two units; two depth pairs
    s1, t1 = torch.tensor([[[1.0, 3.0], [9.0, 9.0]]]), torch.tensor([[[0.0, 0.0], [0.0, 0.0]]])
    s2, t2 = torch.tensor([[[2.0, 2.0], [5.0, 5.0]]]), torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 0]])
    # pair 1: token 0's mean of (1, 9) = 5; pair 2: mean of (0, 4) = 2; padding left out
    assert hidden_mse_sum([s1, s2], [t1, t2], mask).item() == pytest.approx(7.0)
    # without a mask every token counts: pair 1 (5 + 81) / 2, pair 2 (2 + 25) / 2
    assert hidden_mse_sum([s1, s2], [t1, t2]).item() == pytest.approx(43 + 13.5)


def test_depth_weighted_sum_weights_depth_j_by_j():
    losses = [torch.tensor(6.0), torch.tensor(3.0), torch.tensor(1.0)]
    assert depth_weighted_sum(losses).item() == pytest.approx((1 * 6 + 2 * 3 + 3 * 1) / 6)
