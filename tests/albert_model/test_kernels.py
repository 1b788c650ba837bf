import pytest
import torch
import torch.nn.functional as F
from torch import nn

from albert_model import AlbertConfig, kernels
from albert_model.kernels import fusable, linear, without_padding
from albert_model.model import AlbertForPreTraining, AlbertForQuestionAnswering, build_activation

needs_onednn = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")


@needs_onednn
@pytest.mark.parametrize("onednn", [True, False], ids=["oneDNN fused (AVX-512)", "activation in place (AVX2)"])
@pytest.mark.parametrize("activation", [None, "gelu_new", "gelu", "relu", "silu"])
def test_the_inference_linear_equals_f_linear_then_the_activation(activation, onednn, monkeypatch):
    """Both CPU inference paths (kernels.ONEDNN_FASTER picks one by the CPU), whichever this CPU takes."""
    calls = []
    real = kernels._LINEAR_POINTWISE
    monkeypatch.setattr(kernels, "_LINEAR_POINTWISE", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(kernels, "ONEDNN_FASTER", onednn)
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 7, 32), torch.randn(48, 32), torch.randn(48)
    module = None if activation is None else build_activation(activation)
    expected = F.linear(x, w, b) if module is None else module(F.linear(x, w, b))
    with torch.inference_mode():
        assert fusable(x, w)
        got = linear(x, w, b, module)
    assert got.shape == expected.shape and len(calls) == onednn
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("onednn", [True, False])
def test_an_activation_without_a_post_op_is_refused(onednn, monkeypatch):
    monkeypatch.setattr(kernels, "ONEDNN_FASTER", onednn)
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    with torch.inference_mode(), pytest.raises(ValueError, match="Tanh"):
        linear(x, w, None, nn.Tanh())


def test_training_autocast_and_other_dtypes_keep_f_linear_and_the_mask():
    x, w = torch.randn(2, 4), torch.randn(3, 4)
    assert not fusable(x, w)  # autograd on: training's numerics stay aten's
    assert not without_padding(torch.ones(2, 4))
    with torch.no_grad():
        assert without_padding(torch.ones(2, 4)) and not without_padding(torch.tensor([[1, 1, 0]]))
        assert not fusable(x.double(), w.double())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not fusable(x, w)


@needs_onednn
@pytest.mark.parametrize("onednn", [True, False])
@pytest.mark.parametrize("padded", [True, False])
def test_an_inference_forward_equals_the_autograd_forward(padded, onednn, monkeypatch):
    """The QA head's logits without autograd (predict, serve) against the same forward with autograd
    (F.linear and the mask, as before the inference kernels), a batch with and without padding,
    on either CPU path."""
    monkeypatch.setattr(kernels, "ONEDNN_FASTER", onednn)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=300)
    model = AlbertForQuestionAnswering(config).eval()
    ids = torch.randint(5, 300, (3, 40))
    types = (torch.arange(40) >= 9).long().expand(3, -1)
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0 if padded else 1
    expected = model(ids, types, mask)
    with torch.inference_mode():
        got = model(ids, types, mask)
    torch.testing.assert_close(got.start_logits, expected.start_logits.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.end_logits, expected.end_logits.detach(), rtol=1e-5, atol=1e-5)


@needs_onednn
def test_pretraining_gradients_do_not_go_through_the_fused_kernel(monkeypatch):
    calls = []
    real = kernels._LINEAR_POINTWISE
    monkeypatch.setattr(kernels, "_LINEAR_POINTWISE", lambda *a: calls.append(1) or real(*a))
    monkeypatch.setattr(kernels, "ONEDNN_FASTER", True)  # the fused call on any CPU, to count it
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=300)).train()
    out = model(torch.randint(5, 300, (2, 16)))
    (out.mlm_logits.sum() + out.sop_logits.sum()).backward()
    assert calls == []
    with torch.inference_mode():
        model.eval()(torch.randint(5, 300, (2, 16)))
    assert len(calls) == 1 + 4 * 4  # E -> H, then per layer: q/k/v, the attention's output, the FFN's two
