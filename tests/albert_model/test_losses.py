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


def test_without_sentence_labels_the_loss_is_the_masked_lm_loss_and_the_sentence_head_learns_nothing():
    """data.sentence_objective=none: no label, no sentence term, no gradient to the head or the pooler."""
    from albert_model import AlbertConfig, AlbertForPreTraining

    torch.manual_seed(0)
    config = AlbertConfig(
        vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16,
    )  # fmt: skip
    model = AlbertForPreTraining(config)
    ids = torch.randint(5, 40, (3, 10))
    positions, weights = torch.tensor([[1, 2], [3, 0], [4, 5]]), torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    out = model(ids, torch.zeros_like(ids), None, positions)
    labels = ids.gather(1, positions)
    alone = pretraining_loss(out.mlm_logits, out.sop_logits, labels, weights, None)
    with_sop = pretraining_loss(out.mlm_logits, out.sop_logits, labels, weights, torch.tensor([0, 1, 0]))
    assert alone.sop_loss is None and alone.sop_correct.item() == 0
    assert torch.equal(alone.loss, alone.mlm_loss) and torch.equal(alone.mlm_loss, with_sop.mlm_loss)
    assert torch.allclose(with_sop.loss, with_sop.mlm_loss + with_sop.sop_loss)
    alone.loss.backward()
    untouched = [*model.sop_classifier.parameters(), *model.albert.pooler.parameters()]
    assert all(p.grad is None for p in untouched)
    assert model.predictions.dense.weight.grad is not None and model.predictions.dense.weight.grad.abs().sum() > 0
