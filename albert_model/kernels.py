"""The encoder's inference on CPU (no autograd): each linear layer one oneDNN call that adds the bias
and applies the activation in the matrix product's own pass (instead of MKL's GEMM after a copy of
the bias into the output, then a pass of the activation), and a batch without padding attended
without a mask. Measured in docs/BENCHMARKS.md ("Question answering predict"). Training, a GPU,
autocast, and tracing for export or torch.compile take `F.linear` and the mask as before, so
gradients and pretraining's and fine-tuning's losses are computed exactly as without this module."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a DTensor (FSDP2) or another tensor subclass

try:  # a private op of torch's oneDNN build (torch 2.13 has it): a build without it takes F.linear
    _LINEAR_POINTWISE = torch.ops.mkldnn._linear_pointwise
except (AttributeError, RuntimeError):
    _LINEAR_POINTWISE = None


def fusable(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `linear` takes the oneDNN call for these operands: inference (no autograd) on a CPU
    with oneDNN, plain fp32 tensors, no autocast, and no tracer that needs aten's ops."""
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


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, activation: nn.Module | None = None
) -> torch.Tensor:
    """activation(F.linear(x, weight, bias)), `activation` one of model._ACTIVATIONS' modules."""
    if fusable(x, weight):
        return _LINEAR_POINTWISE(x, weight, bias, *_post_op(activation))
    y = F.linear(x, weight, bias)
    return y if activation is None else activation(y)


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


__all__ = ["fusable", "linear", "without_padding"]
