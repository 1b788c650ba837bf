"""The distillation and early-exit losses against hand computations on a tiny batch."""

import math

import pytest
import torch

from pipelines.finetuning.distill_losses import (
    depth_map,
    depth_weighted_sum,
    hidden_mse_sum,
    mixed_loss,
    position_kl_sum,
    sigmoid_kl_sum,
    softmax_kl_sum,
    span_kl_sum,
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


def kl_by_hand(student, teacher, t):
    s, q = softmax(student, t), softmax(teacher, t)
    return sum(qi * math.log(qi / si) for qi, si in zip(q, s)) * t * t


def test_position_kl_sums_each_counted_positions_kl_over_its_labels_by_hand():
    # two sentences of three positions, two labels; counted: the word starts (a sentence's first
    # and third piece, the second's first only); [CLS], continuations and padding are not
    student = [[[1.0, 0.0], [5.0, -5.0], [0.0, 2.0]], [[-1.0, 1.0], [3.0, 3.0], [9.0, 0.0]]]
    teacher = [[[0.0, 1.0], [0.0, 0.0], [2.0, 2.0]], [[1.0, -1.0], [0.0, 7.0], [0.0, 0.0]]]
    counted = [[True, False, True], [True, False, False]]
    t = 2.0
    expected = sum(kl_by_hand(student[b][i], teacher[b][i], t) for b in range(2) for i in range(3) if counted[b][i])
    s, q, mask = torch.tensor(student, requires_grad=True), torch.tensor(teacher), torch.tensor(counted)
    found = position_kl_sum(s, q, mask, t)
    assert found.item() == pytest.approx(expected, rel=1e-5)
    found.backward()
    assert not s.grad[~mask].any() and s.grad[mask].abs().sum() > 0
    moved = s.detach().clone()
    moved[~mask] = torch.tensor([100.0, -100.0])  # an uncounted position's logits change nothing
    assert position_kl_sum(moved, q, mask, t).item() == pytest.approx(expected, rel=1e-5)


def test_span_kl_is_each_windows_kl_over_the_positions_its_teacher_scores_by_hand():
    # two windows of four positions: the first's last is padding (-inf in the teacher's logits)
    inf = math.inf
    student = [[1.0, 2.0, 0.0, 30.0], [0.5, -1.0, 2.0, 0.0]]
    teacher = [[0.0, 3.0, 1.0, -inf], [1.0, 1.0, 0.0, -2.0]]
    t = 3.0
    expected = kl_by_hand(student[0][:3], teacher[0][:3], t) + kl_by_hand(student[1], teacher[1], t)
    s, q = torch.tensor(student, requires_grad=True), torch.tensor(teacher)
    found = span_kl_sum(s, q, t)
    assert found.item() == pytest.approx(expected, rel=1e-5)
    found.backward()
    assert torch.isfinite(s.grad).all() and s.grad[0, 3] == 0  # no gradient into padding, no nan
    moved = s.detach().clone()
    moved[0, 3] = -50.0  # the padding's logit changes nothing
    assert span_kl_sum(moved, q, t).item() == pytest.approx(expected, rel=1e-5)
    assert span_kl_sum(q.nan_to_num(neginf=-7.0), q, t).item() == pytest.approx(0.0, abs=1e-6)


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
