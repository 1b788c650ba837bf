"""The check of an int8 export of a folder's encoder (`albert-ray export onnx --embedding --quantize
int8`): its output, a hidden state, has no argmax whose agreement with PyTorch's would say anything,
so the sentence vectors pooled from it are compared by direction."""

from __future__ import annotations

import os

import torch

from ..inference.embedding import pooled
from ..inference.onnx_runner import ENCODER_OUTPUTS, cpu_session
from .onnx import AGREEMENT_ROWS, CHECK_SHAPES, ExportableModel, check_inputs, torch_outputs


def embedding_similarity(exportable: ExportableModel, path: str | os.PathLike) -> float:
    """The least cosine similarity between onnxruntime's and PyTorch's sentence vectors (the last
    hidden state mean-pooled over the mask, embedding.pooled), for `check_inputs` of AGREEMENT_ROWS
    and CHECK_SHAPES: the check of an int8 encoder export (EMBEDDING_EXPORT), whose output has no
    argmax to agree on."""
    session = cpu_session(str(path))
    least = 1.0
    for batch, sequence in (AGREEMENT_ROWS, *CHECK_SHAPES):
        inputs = check_inputs(exportable.config, batch, sequence)
        mask = torch.from_numpy(inputs["attention_mask"])
        ours = pooled(torch.from_numpy(session.run(list(ENCODER_OUTPUTS), inputs)[0]), mask)[:, 0]
        theirs = pooled(torch.from_numpy(torch_outputs(exportable, inputs)[0]), mask)[:, 0]
        least = min(least, float(torch.nn.functional.cosine_similarity(ours, theirs, dim=-1).min()))
    return least


__all__ = ["embedding_similarity"]
