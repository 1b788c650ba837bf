"""The encoder's inference (no autograd). On a CPU with AVX-512: each linear layer one oneDNN call
that adds the bias and applies the activation in the matrix product's own pass (instead of MKL's GEMM
after a copy of the bias into the output, then a pass of the activation); on other CPUs, where
oneDNN's product is slower than MKL's (AVX2), MKL's GEMM with the activation applied in place (no
second output to allocate and fault in). On every CPU a batch without padding is attended without a
mask. Measured in docs/BENCHMARKS.md ("Question answering predict"). On a GPU: the FFN's
bias and GELU in cuBLASLt's epilogue of its first product. Training, autocast, and tracing for
export or torch.compile take `F.linear` and the mask as before, so gradients and pretraining's and
fine-tuning's losses are computed exactly as without this module."""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a DTensor (FSDP2) or another tensor subclass

_ADDMM_ACTIVATION = getattr(torch, "_addmm_activation", None)  # private too: a torch without it takes F.linear

try:  # a private op of torch's oneDNN build (torch 2.13 has it): a build without it takes F.linear
    _LINEAR_POINTWISE = torch.ops.mkldnn._linear_pointwise
except (AttributeError, RuntimeError):
    _LINEAR_POINTWISE = None


ONEDNN_FASTER = torch.backends.cpu.get_cpu_capability().startswith("AVX512")
"""Whether `linear` takes oneDNN's fused call on this CPU: where torch dispatches AVX-512 kernels
(an Intel Xeon: the QA encoder 1.28x tiny and 1.17x base end to end against MKL's GEMM and an
activation pass); on AVX2 (an AMD EPYC) oneDNN's product is 0.67-0.96x MKL's, and the forward 0.86x
(tiny) and 0.83x (base) of MKL's GEMM with the activation in place (docs/BENCHMARKS.md)."""


def fusable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` takes its CPU inference path for these operands (oneDNN's fused call where
    ONEDNN_FASTER, else the activation in place): inference (no autograd) on a CPU with oneDNN, plain
    fp32 tensors, no autocast, and no tracer that needs aten's ops."""
    return (
        not torch.is_grad_enabled()
        and x.device.type == "cpu"
        and x.dtype == torch.float32 == weight.dtype
        and type(x) in _PLAIN
        and type(weight) in _PLAIN
        and torch.backends.mkldnn.is_available()
        and _LINEAR_POINTWISE is not None
        and not torch.is_autocast_enabled("cpu")
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
    )


def _post_op(activation: nn.Module | None) -> tuple[str, list, str]:
    """oneDNN's post-op (its name, scalars, algorithm) doing what `activation` does."""
    if activation is None:
        return "none", [], ""
    if isinstance(activation, nn.GELU):
        return "gelu", [], activation.approximate
    if isinstance(activation, nn.ReLU):
        return "relu", [], ""
    if isinstance(activation, nn.SiLU):
        return "swish", [], ""
    raise ValueError(f"no oneDNN post-op for {activation!r}")


def epilogue_fusable(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: nn.Module | None
) -> bool:
    """Whether `linear` takes cuBLASLt's bias + GELU epilogue (torch._addmm_activation): inference
    on CUDA, plain tensors of one dtype, no autocast or tracer, and GELU's tanh form, ALBERT's
    gelu_new, which is the epilogue's own (tests/albert_model/test_fused.py checks it on a GPU)."""
    return (
        _ADDMM_ACTIVATION is not None
        and not torch.is_grad_enabled()
        and x.device.type == "cuda"
        and isinstance(activation, nn.GELU)
        and activation.approximate == "tanh"
        and bias is not None
        and type(x) in _PLAIN
        and type(weight) in _PLAIN
        and x.dtype == weight.dtype == bias.dtype
        and not torch.is_autocast_enabled("cuda")
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
    )


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: nn.Module | None = None
) -> torch.Tensor:
    """activation(F.linear(x, weight, bias)), `activation` one of model._ACTIVATIONS' modules."""
    if fusable(x, weight):
        if ONEDNN_FASTER:
            return _LINEAR_POINTWISE(x, weight, bias, *_post_op(activation))
        y = F.linear(x, weight, bias)  # MKL's GEMM, then the activation over its own output
        return y if activation is None else _in_place(y, activation)
    if epilogue_fusable(x, weight, bias, activation):  # one pass: the GELU in the product's epilogue
        y = _ADDMM_ACTIVATION(bias, x.reshape(-1, x.shape[-1]), weight.t(), use_gelu=True)
        return y.view(*x.shape[:-1], weight.shape[0])
    y = F.linear(x, weight, bias)
    return y if activation is None else activation(y)


def _in_place(y: torch.Tensor, activation: nn.Module) -> torch.Tensor:
    """`activation(y)` written over `y` (inference only: autograd would need y)."""
    if isinstance(activation, nn.GELU):
        return torch.ops.aten.gelu_(y, approximate=activation.approximate)
    if isinstance(activation, nn.ReLU):
        return torch.relu_(y)
    if isinstance(activation, nn.SiLU):
        return F.silu(y, inplace=True)
    raise ValueError(f"no in-place form of {activation!r}")


def inference_attention(device: torch.device) -> contextlib.AbstractContextManager:
    """SDPA's backends for inference on `device`: on CUDA, without cuDNN's (torch's first choice on
    Hopper), which builds a plan per new shape while prediction's batches come in many widths (rows
    sorted by length, padded per batch); flash attention, else memory-efficient, else the math one.
    Elsewhere torch's own choice. torch's backend flags are global: the context holds for every
    thread while it lasts."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def without_padding(attention_mask: torch.Tensor) -> bool:
    """Whether an inference batch on CPU has no padding, so that attention can run without a mask
    (torch's CPU flash attention is ~20% faster unmasked). Not asked with autograd on, on a GPU (a
    synchronisation) or under a tracer (a data-dependent branch)."""
    return (
        not torch.is_grad_enabled()
        and attention_mask.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and not torch.jit.is_tracing()
        and bool(attention_mask.all())
    )


__all__ = ["ONEDNN_FASTER", "epilogue_fusable", "fusable", "inference_attention", "linear", "without_padding"]
