"""The fused ops against the eager ones they replace: the MLM decoder fused into its cross-entropy
(losses.fused_pretraining_sums, Liger Kernel's on CUDA) and the FFN's bias and GELU in cuBLASLt's
epilogue (kernels.linear at inference on CUDA). On CPU both fall back to the eager ops, and the
fallback is what the CPU tests check (the plumbing: a model under fused_mlm_loss trains exactly as
one without); the gpu tests (bench/gpu_suite.py) check the fused kernels themselves, with fresh
random inputs, in fp32 (tight) and bf16 (its rounding)."""

import importlib.util

import pytest
import torch
import torch.nn.functional as F

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.kernels import epilogue_fusable, linear
from albert_model.losses import fused_mlm_available, fused_pretraining_sums, output_sums, pretraining_sums

LIGER = importlib.util.find_spec("liger_kernel") is not None


def batch(config: AlbertConfig, device: str, n: int = 6, seq: int = 24, p: int = 5) -> dict:
    g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    weights = (torch.rand(n, p, generator=g) < 0.8).float()
    weights[:, 0] = 1.0  # every row has a masked position
    return {
        "input_ids": torch.randint(5, config.vocab_size, (n, seq), generator=g).to(device),
        "token_type_ids": torch.zeros(n, seq, dtype=torch.long, device=device),
        "attention_mask": torch.ones(n, seq, dtype=torch.long, device=device),
        "masked_positions": torch.stack([torch.randperm(seq - 1, generator=g)[:p] + 1 for _ in range(n)]).to(device),
        "masked_lm_ids": torch.randint(5, config.vocab_size, (n, p), generator=g).to(device),
        "masked_lm_weights": weights.to(device),
        "sentence_order_label": torch.randint(0, 2, (n,), generator=g).to(device),
    }


def sums_and_grads(model: AlbertForPreTraining, mb: dict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(mb["input_ids"], mb["token_type_ids"], mb["attention_mask"], mb["masked_positions"])
    s = output_sums(model, out, mb)
    (s.mlm_ce / s.mlm_weight + s.sop_ce / len(mb["input_ids"])).backward()
    values = torch.stack([s.mlm_ce, s.sop_ce, s.mlm_correct, s.mlm_weight, s.sop_correct]).detach()
    return values, {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def fused_vs_eager(device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, dict, dict]:
    torch.manual_seed(int(torch.randint(0, 2**31, ())))
    config = AlbertConfig.from_preset("tiny", vocab_size=3000)
    model = AlbertForPreTraining(config).to(device, dtype)
    mb = batch(config, device)
    eager_values, eager_grads = sums_and_grads(model, mb)
    model.fused_mlm_loss = True
    fused_values, fused_grads = sums_and_grads(model, mb)
    return eager_values, fused_values, eager_grads, fused_grads


def test_fused_mlm_loss_without_liger_trains_exactly_as_the_logits():
    """On CPU the fused path computes the logits and pretraining_sums: every sum and gradient equal."""
    assert not fused_mlm_available(torch.device("cpu"))
    eager, fused, eager_grads, fused_grads = fused_vs_eager("cpu", torch.float32)
    assert torch.equal(eager, fused)
    for name, grad in eager_grads.items():
        assert torch.equal(grad, fused_grads[name]), name


def test_the_fused_model_returns_the_decoders_input_not_logits():
    config = AlbertConfig.from_preset("tiny", vocab_size=300)
    model = AlbertForPreTraining(config).eval()
    mb = batch(config, "cpu")
    args = (mb["input_ids"], mb["token_type_ids"], mb["attention_mask"], mb["masked_positions"])
    with torch.no_grad():
        plain = model(*args)
        model.fused_mlm_loss = True
        fused = model(*args)
    assert plain.mlm_hidden is None and fused.mlm_logits is None
    assert fused.mlm_hidden.shape == (6, 5, config.embedding_size)
    logits = F.linear(fused.mlm_hidden, model.albert.embeddings.word_embeddings.weight, model.predictions.bias)
    assert torch.equal(logits, plain.mlm_logits)


def test_epilogue_is_taken_only_for_cuda_inference_with_gelu_tanh():
    x, w, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)
    with torch.no_grad():
        assert not epilogue_fusable(x, w, b, torch.nn.GELU(approximate="tanh"))  # a CPU tensor
        assert torch.allclose(
            linear(x, w, b, torch.nn.GELU(approximate="tanh")), F.gelu(x @ w.T + b, approximate="tanh"), atol=1e-5
        )


def test_inference_on_cuda_attends_without_cudnn_and_restores_the_backends():
    """cuDNN's attention builds a plan per new shape (~0.1 s each on an H200: docs/BENCHMARKS.md), and
    prediction's batches come in many widths: inference on CUDA leaves it out, and only there."""
    from albert_model import kernels

    before = torch.backends.cuda.cudnn_sdp_enabled()
    with kernels.inference_attention(torch.device("cuda")):  # flags only: no GPU needed to set them
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.mem_efficient_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    with kernels.inference_attention(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


@pytest.mark.gpu
@pytest.mark.skipif(not LIGER, reason="Liger Kernel is not installed: the fused MLM loss falls back to the logits")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_liger_fused_mlm_loss_matches_the_logits_on_cuda(dtype):
    assert fused_mlm_available(torch.device("cuda"))
    for _ in range(2):  # fresh random models and batches each time
        eager, fused, eager_grads, fused_grads = fused_vs_eager("cuda", dtype)
        tolerance = 1e-4 if dtype == torch.float32 else 2e-2
        assert torch.isfinite(fused).all()
        assert (fused[0] - eager[0]).abs() <= tolerance * eager[0].abs(), (fused, eager)  # mlm_ce
        assert torch.equal(fused[1:2], eager[1:2]) and torch.equal(fused[3:], eager[3:])  # sop, weight
        assert (fused[2] - eager[2]).abs() <= (0 if dtype == torch.float32 else 2)  # correct: ties may flip in bf16
        # each gradient's error against the larger of its norm and a thousandth of the largest one's:
        # the key bias's gradient is zero but for rounding (softmax ignores a shift shared by all keys)
        floor = 1e-3 * max(g.double().norm() for g in eager_grads.values())
        for name, grad in eager_grads.items():
            ref = grad.double()
            error = (fused_grads[name].double() - ref).norm() / torch.maximum(ref.norm(), floor)
            assert error < (1e-4 if dtype == torch.float32 else 3e-2), (name, error.item())


@pytest.mark.gpu
def test_fused_pretraining_sums_ignore_weight_zero_positions_on_cuda():
    """Weight 0 (padding) positions take no part: changing their targets changes nothing."""
    torch.manual_seed(int(torch.randint(0, 2**31, ())))
    hidden = torch.randn(4, 6, 32, device="cuda")
    weight, bias = torch.randn(500, 32, device="cuda"), torch.randn(500, device="cuda")
    ids = torch.randint(0, 500, (4, 6), device="cuda")
    weights = torch.ones(4, 6, device="cuda")
    weights[:, 4:] = 0
    sop, labels = torch.randn(4, 2, device="cuda"), torch.randint(0, 2, (4,), device="cuda")
    a = fused_pretraining_sums(hidden, weight, bias, sop, ids, weights, labels)
    other = ids.clone()
    other[:, 4:] = (other[:, 4:] + 7) % 500
    b = fused_pretraining_sums(hidden, weight, bias, sop, other, weights, labels)
    reference = pretraining_sums(F.linear(hidden, weight, bias), sop, ids, weights, labels)
    assert torch.equal(a.mlm_ce, b.mlm_ce) and a.mlm_weight.item() == 16
    assert (a.mlm_ce - reference.mlm_ce).abs() <= 1e-4 * reference.mlm_ce.abs()
    assert a.mlm_correct.item() == reference.mlm_correct.item()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_gelu_epilogue_matches_linear_then_gelu_tanh_on_cuda(dtype):
    gelu = torch.nn.GELU(approximate="tanh")
    for shape in [(3, 17, 64), (64, 128, 768)]:
        x = torch.randn(*shape, device="cuda", dtype=dtype)
        w = torch.randn(3 * shape[-1], shape[-1], device="cuda", dtype=dtype) / shape[-1] ** 0.5
        b = torch.randn(3 * shape[-1], device="cuda", dtype=dtype)
        with torch.no_grad():
            assert epilogue_fusable(x, w, b, gelu)
            fused = linear(x, w, b, gelu)
            pre = F.linear(x.double(), w.double(), b.double())
            reference, exact = gelu(pre), F.gelu(pre)
        assert fused.shape == reference.shape and fused.dtype == dtype
        error = ((fused.double() - reference).norm() / reference.norm()).item()
        assert error < (1e-4 if dtype == torch.float32 else 1e-2), error  # fp32 products; bf16's rounding
        if dtype == torch.float32:  # the tanh form (ALBERT's gelu_new), not erf's
            assert error < ((fused.double() - exact).norm() / exact.norm()).item()
    with torch.enable_grad():  # training takes F.linear: autograd needs the pre-activation
        assert not epilogue_fusable(x, w, b, gelu)
