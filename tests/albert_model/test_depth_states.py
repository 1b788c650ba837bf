"""The state after each depth step and the head read at every depth (early exit, depth distillation)."""

import pytest
import torch

from albert_model import AlbertConfig, AlbertForSequenceClassification


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
        depths = model.depth_logits(ids, attention_mask=mask)
        assert depths.shape == (4, 2, 3)
        assert torch.allclose(depths[-1], model(ids, attention_mask=mask), atol=1e-5)
        assert not torch.allclose(depths[1], depths[-1], atol=1e-3)


def test_with_one_shared_group_depth_2_is_the_half_depth_model_of_the_same_weights():
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny()).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(100)
    ids, mask = torch.randint(5, 97, (2, 7)), torch.tensor([[1] * 7, [1] * 5 + [0] * 2])
    with torch.no_grad():
        depths = model.depth_logits(ids, attention_mask=mask)
        # the same weights applied twice: the half-depth student at its start
        half = AlbertForSequenceClassification(tiny(num_hidden_layers=2)).eval()
        half.load_state_dict(model.state_dict())
        assert torch.allclose(depths[1], half(ids, attention_mask=mask), atol=1e-5)
        assert not torch.allclose(depths[0], half(ids, attention_mask=mask), atol=1e-3)
