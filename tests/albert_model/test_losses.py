import math

import torch
import torch.nn.functional as F

from albert_model.losses import pretraining_loss


def test_mlm_loss_is_weighted_mean_over_real_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11)
    ids = torch.randint(0, 11, (2, 3))
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    sop_logits, sop_labels = torch.randn(2, 2), torch.tensor([0, 1])
    out = pretraining_loss(logits, sop_logits, ids, weights, sop_labels)
    real = [(0, 0), (0, 1), (1, 0)]
    manual = sum(F.cross_entropy(logits[b, p][None], ids[b, p][None]) for b, p in real) / (3 + 1e-5)
    assert torch.allclose(out.mlm_loss, manual)
    assert torch.allclose(out.sop_loss, F.cross_entropy(sop_logits, sop_labels))
    assert torch.allclose(out.loss, out.mlm_loss + out.sop_loss)
    assert out.mlm_weight.item() == 3


def test_padding_positions_do_not_change_the_loss_or_accuracy():
    logits = torch.zeros(1, 2, 5)
    logits[0, 0, 3] = 10.0  # confident and right at the real position
    ids = torch.tensor([[3, 1]])
    out = pretraining_loss(logits, torch.zeros(1, 2), ids, torch.tensor([[1.0, 0.0]]), torch.tensor([0]))
    assert out.mlm_loss.item() < 1e-3
    assert out.mlm_correct.item() == 1.0
    uniform = pretraining_loss(torch.zeros(1, 1, 5), torch.zeros(1, 2), ids[:, :1], torch.ones(1, 1), torch.tensor([0]))
    assert math.isclose(uniform.mlm_loss.item(), math.log(5), rel_tol=1e-4)
