"""The state after each depth step and the head read at every depth (early exit, depth distillation)."""

import pytest
import torch

from albert_model import (
    AlbertConfig,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertForTokenClassification,
)
from albert_model.depths import ExitRule, depth_logits, early_exit, read_state, step_states


def tiny(**kw) -> AlbertConfig:
    defaults = dict(vocab_size=97, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4)
    return AlbertConfig(**{**defaults, "intermediate_size": 64, "num_labels": 3, **kw})


@pytest.mark.parametrize("kw", [{}, dict(num_hidden_groups=2, inner_group_num=2)])
def test_the_last_depths_logits_are_forwards_and_each_depth_is_a_shallower_model(kw):
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny(**kw)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(100)  # logits spread enough to tell depths apart
    ids, mask = torch.randint(5, 97, (2, 7)), torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    with torch.no_grad():
        depths = depth_logits(model, ids, attention_mask=mask)
        assert depths.shape == (4, 2, 3)
        assert torch.allclose(depths[-1], model(ids, attention_mask=mask), atol=1e-5)
        assert not torch.allclose(depths[1], depths[-1], atol=1e-3)


@pytest.mark.parametrize(
    "head", [AlbertForSequenceClassification, AlbertForTokenClassification, AlbertForQuestionAnswering]
)
def test_each_head_reads_the_last_state_as_its_forward_does_and_a_shallower_one_as_the_shallower_model(head):
    """Hidden-state matching reads the student's answer from the states it matches (any head)."""
    torch.manual_seed(0)
    model = head(tiny()).eval()
    half = head(tiny(num_hidden_layers=2)).eval()
    half.load_state_dict(model.state_dict())
    ids, mask = torch.randint(5, 97, (2, 7)), torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    with torch.no_grad():
        states = step_states(model.albert, ids, attention_mask=mask)
        for state, forward in ((states[-1], model), (states[1], half)):
            read, expected = read_state(model, state), forward(ids, attention_mask=mask)
            for name in ("start_logits", "end_logits") if head is AlbertForQuestionAnswering else ():
                assert torch.allclose(getattr(read, name), getattr(expected, name), atol=1e-5)
            if head is not AlbertForQuestionAnswering:
                assert torch.allclose(read, expected, atol=1e-5)


def test_with_one_shared_group_depth_2_is_the_half_depth_model_of_the_same_weights():
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny()).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(100)
    ids, mask = torch.randint(5, 97, (2, 7)), torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    with torch.no_grad():
        depths = depth_logits(model, ids, attention_mask=mask)
        # the same weights applied twice: the half-depth student at its start
        half = AlbertForSequenceClassification(tiny(num_hidden_layers=2)).eval()
        half.load_state_dict(model.state_dict())
        assert torch.allclose(depths[1], half(ids, attention_mask=mask), atol=1e-5)
        assert not torch.allclose(depths[0], half(ids, attention_mask=mask), atol=1e-3)


def spread_model(**kw) -> AlbertForSequenceClassification:
    """Wide initial weights: rows' answers differ and change with depth (at 0.02 every row agrees)."""
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny(initializer_range=0.2, **kw)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(100)
    return model


def by_hand(depths: torch.Tensor, patience: int) -> list[int]:
    """PABEE's rule on each row's argmax at every depth: exit once it has held for `patience` more depths."""
    exits = []
    for row in depths.argmax(-1).T.tolist():
        streak, exit_at = 0, len(row)
        for j in range(1, len(row)):
            streak = streak + 1 if row[j] == row[j - 1] else 0
            if streak >= patience:
                exit_at = j + 1
                break
        exits.append(exit_at)
    return exits


@pytest.mark.parametrize("patience", [1, 2, 3])
def test_patience_exits_where_pabees_rule_says_with_that_depths_logits(patience):
    model = spread_model(num_hidden_layers=6)
    ids = torch.randint(5, 97, (16, 9))
    mask = torch.ones_like(ids)
    mask[::3, 6:] = 0  # padding, which rows leaving the batch carry with them
    with torch.no_grad():
        depths = depth_logits(model, ids, attention_mask=mask)
    logits, exited = early_exit(model, ExitRule(patience=patience), ids, attention_mask=mask)
    expected = by_hand(depths, patience)
    assert exited.tolist() == expected
    assert len(set(expected)) > 1  # rows exit at different depths: the batch shrinks midway
    for i, at in enumerate(expected):
        assert torch.allclose(logits[i], depths[at - 1, i], rtol=1e-5, atol=1e-4)


def test_without_a_rule_every_row_runs_to_the_last_depth_and_gets_forwards_logits():
    model = spread_model()
    ids = torch.randint(5, 97, (3, 7))
    logits, exited = early_exit(model, ExitRule(), ids)
    assert exited.tolist() == [4, 4, 4]
    with torch.no_grad():
        assert torch.allclose(logits, model(ids), atol=1e-5)


def test_an_entropy_threshold_exits_at_the_first_depth_sure_enough():
    model = spread_model()
    ids = torch.randint(5, 97, (8, 7))
    with torch.no_grad():
        depths = depth_logits(model, ids)
    entropy = -(depths.softmax(-1) * depths.log_softmax(-1)).sum(-1)  # (D, B)
    threshold = float(entropy.median())
    _, exited = early_exit(model, ExitRule(entropy=threshold), ids)
    for i in range(8):
        sure = (entropy[:, i] < threshold).nonzero()
        assert exited[i].item() == (int(sure[0]) + 1 if len(sure) else 4)
