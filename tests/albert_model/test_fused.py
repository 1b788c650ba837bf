"""The fused ops against the eager ones they replace at inference on CUDA: the FFN's bias and GELU in
cuBLASLt's epilogue (kernels.linear), and attention without cuDNN's backend (kernels.inference_attention).
The gpu tests (bench/gpu_suite.py) check the epilogue itself with fresh random inputs, in fp32 (tight,
and the tanh form of GELU, not erf's) and bf16 (its rounding); on CPU `linear` takes its own path.
(Liger Kernel's fused linear cross-entropy for the MLM head was measured and not kept:
docs/BENCHMARKS.md, "Fused ops and GPU inference on an H200".)"""

import pytest
import torch
import torch.nn.functional as F

from albert_model.kernels import epilogue_fusable, linear


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


@pytest.mark.gpu
def test_inference_attention_answers_as_torchs_default_on_cuda():
    """Leaving cuDNN's attention out changes the kernels, not the function: a classifier's logits under
    inference_attention match torch's own backend choice within bf16's rounding, padding included."""
    from albert_model import AlbertConfig, AlbertForSequenceClassification, kernels

    torch.manual_seed(int(torch.randint(0, 2**31, ())))
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", vocab_size=500).replace(num_labels=5))
    model = model.to("cuda", torch.bfloat16).eval()
    ids = torch.randint(5, 500, (16, 77), device="cuda")
    mask = (torch.arange(77, device="cuda") < torch.randint(10, 78, (16, 1), device="cuda")).long()
    with torch.no_grad():
        default = model(ids, attention_mask=mask).float()
        with kernels.inference_attention(torch.device("cuda")):
            ours = model(ids, attention_mask=mask).float()
    error = ((ours - default).norm() / default.norm()).item()
    assert torch.isfinite(ours).all() and error < 2e-2, error
