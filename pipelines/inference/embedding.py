"""Sentence embeddings (predict.output_kind=embedding, serve's POST {route}/embed): a text, or a text
pair, encoded as the sequence families encode one (PairTokenizer, longest first, at the model's
length), run through the encoder of any model folder (a fine-tuned export's, its head ignored, or
the pretrain stage's hf/), and its last hidden layer pooled. The pooling is defined here once for
every path (the torch encoder, an ONNX export's `last_hidden_state`): the mean of the states over
the attention mask (padding left out; the sentence-transformers default), or the [CLS] position's
state, optionally scaled to unit length (L2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from albert_model.hf import load_hf_encoder

from ..config.predicting import POOLINGS
from ..errors import BadInput
from ..finetuning.families import FAMILIES
from ..finetuning.families._sequence.inference import SequenceInference
from ..finetuning.inference import FamilyInference, ModelUse
from ..finetuning.loop import predict
from ..finetuning.tokenizer import PairTokenizer
from ..storage.models import applied_length, read_model_config
from .onnx_runner import ENCODER_OUTPUTS
from .predictor import model_use, placed

EMBEDDING = "embedding"
"""The output column, and the rows' kind where predict embeds (in place of a family's name)."""


def pooled(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Each row's sentence vectors by every pooling, in POOLINGS' order: (B, S, H) -> (B, 2, H). The
    mean counts the positions whose mask is 1 (None: every position, as the loop passes a batch
    without padding)."""
    if attention_mask is None:
        mean = last_hidden_state.mean(dim=1)
    else:
        mask = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)  # (B, S, 1)
        mean = (last_hidden_state * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
    return torch.stack([mean, last_hidden_state[:, 0]], dim=1)


def sentence_vector(vectors: np.ndarray, pooling: str, normalize: bool) -> list[float]:
    """One row's vector of `pooled`'s (2, H) by `pooling`, scaled to unit length with `normalize`."""
    vector = vectors[POOLINGS.index(pooling)].astype(np.float32)
    if normalize:
        vector = vector / max(float(np.linalg.norm(vector)), 1e-12)  # a zero vector stays zero
    return vector.tolist()


class SentenceVectors(nn.Module):
    """An encoder (the torch AlbertModel, or an OnnxRunner of an encoder export) called as
    loop.predict calls a model: `pooled` of its last hidden state."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        out = self.encoder(input_ids=input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        return pooled(getattr(out, "last_hidden_state", out), attention_mask)


class EmbeddingRows:
    """What a row to embed is, as a FamilyInference says it for predict's reading and serve's
    requests: a sequence family's `text` and optional `text_pair`, checked and encoded as they are."""

    fields = SequenceInference.fields
    required = SequenceInference.required
    output = {EMBEDDING: pa.list_(pa.float32())}
    file_suffixes = ()
    check_row = SequenceInference.check_row
    encode = SequenceInference.encode
    read_file = SequenceInference.read_file  # tables only


EMBEDDING_ROWS = EmbeddingRows()


ENCODER_ARCHITECTURES = ("AlbertModel", "AlbertForPreTraining")
"""The architectures of a folder that is an encoder and no more (the pretrain stage's hf/)."""


def has_task_head(config: Mapping[str, Any], where: str) -> bool:
    """Whether a model folder (its config.json: `config`) has a task head, not only an encoder; an
    architecture that is neither is BadInput naming `where`."""
    architecture = (config.get("architectures") or ["AlbertModel"])[0]
    heads = {f.architecture for f in FAMILIES.values()}
    if architecture not in (*ENCODER_ARCHITECTURES, *heads):
        raise BadInput(
            f"{where}: an export of {architecture}; embeddings are read from an ALBERT encoder "
            f"({', '.join([*ENCODER_ARCHITECTURES, *sorted(heads)])})"
        )
    return architecture in heads


def rows_inference(kind: str) -> FamilyInference:
    """What reads predict's rows: the embedding's, or the family's of that name."""
    return EMBEDDING_ROWS if kind == EMBEDDING else FAMILIES[kind].load_inference()


@dataclass
class Embedder:
    """A model folder's encoder applied to rows: `vectors(rows)` by every pooling, `run(rows)` each
    row's `embedding` by the chosen one (predict's replica calls it as it calls a Predictor)."""

    model: SentenceVectors
    use: ModelUse
    batch_size: int = 64
    device: torch.device = torch.device("cpu")
    max_batch_tokens: int | None = None
    pooling: str = "mean"
    normalize: bool = False
    dimension: int = 0
    """The vectors' length: the encoder's hidden size."""

    @classmethod
    def load(
        cls,
        model_dir: str,
        max_seq_length: int | None = None,
        batch_size: int = 64,
        device: str | None = None,
        onnx: str | None = None,
        max_batch_tokens: int | None = None,
        pooling: str = "mean",
        normalize: bool = False,
        encoder: nn.Module | None = None,
    ) -> Embedder:
        """The local folder's encoder (`load_hf_encoder`), or `encoder` (a loaded head's, shared),
        or, with `onnx`, that encoder export (ENCODER_OUTPUTS) run on CPU; applied at `max_seq_length`
        (None: storage.models.applied_length's default, as predict's)."""
        config = read_model_config(model_dir, "model")
        tokenizer = PairTokenizer(model_dir)
        trained = tokenizer.model_max_length
        length = applied_length(config, max_seq_length, "max_seq_length", model_dir, tokenizer=trained)
        shared = encoder
        encoder, target = placed(
            onnx, ENCODER_OUTPUTS, device, lambda: shared if shared is not None else load_hf_encoder(model_dir)
        )
        use = model_use(config, tokenizer, length, model_dir)
        vectors = SentenceVectors(encoder)
        return cls(vectors, use, batch_size, target, max_batch_tokens, pooling, normalize, int(config["hidden_size"]))

    @property
    def output(self) -> dict[str, pa.DataType]:
        return EMBEDDING_ROWS.output

    def vectors(self, rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """(N, 2, H): each row's vectors by every pooling (`pooled`), in the rows' order."""
        encoded = EMBEDDING_ROWS.encode(rows, self.use)
        return predict(
            self.model,
            encoded.features,
            self.batch_size,
            self.use.tokenizer.pad_id,
            device=self.device,
            max_tokens=self.max_batch_tokens,
        )

    def run(self, rows: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, str]]:
        """Each row's `embedding` by the chosen pooling; no row is rejected by encoding."""
        if not rows:
            return [], {}
        return [{EMBEDDING: sentence_vector(v, self.pooling, self.normalize)} for v in self.vectors(rows)], {}


__all__ = [
    "EMBEDDING",
    "EMBEDDING_ROWS",
    "ENCODER_ARCHITECTURES",
    "ENCODER_OUTPUTS",
    "Embedder",
    "EmbeddingRows",
    "SentenceVectors",
    "has_task_head",
    "pooled",
    "rows_inference",
    "sentence_vector",
]
