"""ALBERT architecture: factorized embeddings, shared post-LN layers, pooler and task heads.

Parameter names follow transformers' ALBERT, so checkpoints map one to one (see hf.py).
Shapes: B batch, S sequence, P masked positions, E embedding, H hidden, nh heads, hs head size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils._pytree
from torch import nn

from . import kernels
from .config import AlbertConfig

_ACTIVATIONS = {
    "gelu_new": lambda: nn.GELU(approximate="tanh"),
    "gelu": nn.GELU,
    "relu": nn.ReLU,
    "silu": nn.SiLU,
}


def build_activation(name: str) -> nn.Module:
    return _ACTIVATIONS[name]()


class AlbertEmbeddings(nn.Module):
    """Token + position + token-type embeddings of width E (the factorized part)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.embedding_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None) -> torch.Tensor:
        seq_len = input_ids.shape[1]
        positions = torch.arange(seq_len, device=input_ids.device)
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)  # (B, S, E)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class AlbertAttention(nn.Module):
    """Multi-head self-attention sublayer with its residual and post-LayerNorm."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.attention_dropout_p = config.attention_probs_dropout_prob
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """With `positions` ([B, P]) only those query rows are computed: output (B, P, H)."""
        B, S, H = x.shape
        if positions is None:
            # One GEMM for q, k and v: the weights stay separate parameters for checkpoint names.
            w = torch.cat([self.query.weight, self.key.weight, self.value.weight])
            b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
            q, k, v = kernels.linear(x, w, b).view(B, S, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        else:
            w = torch.cat([self.key.weight, self.value.weight])
            b = torch.cat([self.key.bias, self.value.bias])
            k, v = F.linear(x, w, b).view(B, S, 2, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
            x = gather_positions(x, positions)  # (B, P, H)
            q = self.query(x).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
        # q: (B, nh, S or P, hs); k, v: (B, nh, S, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=self.attention_dropout_p if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(B, -1, H)
        y = kernels.linear(y, self.dense.weight, self.dense.bias)
        return self.LayerNorm(x + self.output_dropout(y))


class AlbertLayer(nn.Module):
    """One post-LN transformer layer: attention sublayer, then the FFN sublayer."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(config.hidden_size, config.intermediate_size)
        self.activation = build_activation(config.hidden_act)
        self.ffn_output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.full_layer_layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.attention(x, attn_mask, positions)
        h = kernels.linear(x, self.ffn.weight, self.ffn.bias, self.activation)  # (B, S, I)
        h = kernels.linear(h, self.ffn_output.weight, self.ffn_output.bias)
        return self.full_layer_layer_norm(x + self.dropout(h))


class AlbertLayerGroup(nn.Module):
    """`inner_group_num` layers run in sequence at one depth step."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.albert_layers = nn.ModuleList(AlbertLayer(config) for _ in range(config.inner_group_num))

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        last = len(self.albert_layers) - 1
        for i, layer in enumerate(self.albert_layers):
            x = layer(x, attn_mask, positions if i == last else None)
        return x


# Submodules of a layer that the partial sharing modes reuse across depth steps.
_SHARED_SUBMODULES = {
    "attention": ("attention",),
    "ffn": ("ffn", "ffn_output", "full_layer_layer_norm"),
}


class AlbertTransformer(nn.Module):
    """E->H projection, then `num_hidden_layers` depth steps over the shared layer groups.

    sharing="all": `num_hidden_groups` groups hold every parameter. Otherwise each depth step has
    its own group, and under "attention" / "ffn" that sublayer is one module reused by every step
    of the same sharing group (a module registered under several parents is one set of weights)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_size, config.hidden_size)
        num_groups = config.num_hidden_groups if config.sharing == "all" else config.num_hidden_layers
        self.albert_layer_groups = nn.ModuleList(AlbertLayerGroup(config) for _ in range(num_groups))
        shared = _SHARED_SUBMODULES.get(config.sharing, ())
        for step in range(config.num_hidden_layers if shared else 0):
            owner = self._first_step_of_group(config.group_of_step(step))
            for layer, owner_layer in zip(
                self.albert_layer_groups[step].albert_layers, self.albert_layer_groups[owner].albert_layers
            ):
                for name in shared:
                    setattr(layer, name, getattr(owner_layer, name))

    def _first_step_of_group(self, group: int) -> int:
        return next(i for i in range(self.config.num_hidden_layers) if self.config.group_of_step(i) == group)

    def group_of_step(self, step: int) -> int:
        return self.config.group_of_step(step) if self.config.sharing == "all" else step

    def forward(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """With `positions` ([B, P]) the last layer runs only there: (B, P, H), else (B, S, H)."""
        mapping = self.embedding_hidden_mapping_in
        x = kernels.linear(x, mapping.weight, mapping.bias)  # (B, S, E) -> (B, S, H)
        last = self.config.num_hidden_layers - 1
        for step in range(self.config.num_hidden_layers):
            x = self.albert_layer_groups[self.group_of_step(step)](x, attn_mask, positions if step == last else None)
        return x

    def step_states(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> list[torch.Tensor]:
        """The state after each depth step, (B, S, H) each: what early exit and depth distillation read."""
        x = self.embedding_hidden_mapping_in(x)
        states = []
        for step in range(self.config.num_hidden_layers):
            x = self.albert_layer_groups[self.group_of_step(step)](x, attn_mask)
            states.append(x)
        return states


def gather_positions(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """x[b, positions[b]] for every b: (B, S, H), (B, P) -> (B, P, H)."""
    return torch.gather(x, 1, positions.long().unsqueeze(-1).expand(-1, -1, x.shape[-1]))


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """[B, S] 1 = token, 0 = padding  ->  boolean SDPA mask [B, 1, 1, S] (True = attend)."""
    if attention_mask is None or kernels.without_padding(attention_mask):
        return None
    return attention_mask.bool()[:, None, None, :]


@dataclass
class AlbertModelOutput:
    last_hidden_state: torch.Tensor  # (B, S, H), or (B, P, H) at the requested positions
    pooler_output: torch.Tensor | None  # (B, H); None without a pooler


class AlbertModel(nn.Module):
    """Embeddings, shared encoder and the tanh pooler over [CLS] (left out by heads that never
    read it, as in transformers: an unused parameter would stall DDP's gradient reduction)."""

    def __init__(self, config: AlbertConfig, init: bool = True, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.embeddings = AlbertEmbeddings(config)
        self.encoder = AlbertTransformer(config)
        self.pooler = nn.Linear(config.hidden_size, config.hidden_size) if add_pooling_layer else None
        if init:
            init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> AlbertModelOutput:
        """`positions` ([B, P]): hidden states only there; the last layer runs only at [CLS] and those
        positions (exact: its other outputs feed nothing), most of a layer saved at ~15% masked."""
        if positions is not None:
            positions = F.pad(positions, (1, 0))  # [CLS] at index 0, for the pooler
        x = self.encoder(self.embeddings(input_ids, token_type_ids), padding_mask(attention_mask), positions)
        pooled = None if self.pooler is None else torch.tanh(self.pooler(x[:, 0]))
        return AlbertModelOutput(last_hidden_state=x if positions is None else x[:, 1:], pooler_output=pooled)


class AlbertMLMHead(nn.Module):
    """H -> E transform, then the decoder tied to the word embeddings (weight passed in)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.activation = build_activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.LayerNorm(self.activation(self.dense(x))), word_embeddings, self.bias)


class AlbertSOPHead(nn.Module):
    """Sentence-order prediction on the pooled output. No dropout, as in the TF original."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)


@dataclass
class AlbertPreTrainingOutput:
    mlm_logits: torch.Tensor  # (B, P, V) with masked_positions, else (B, S, V)
    sop_logits: torch.Tensor  # (B, 2)
    last_hidden_state: torch.Tensor  # (B, P, H) with masked_positions, else (B, S, H)


@dataclass(frozen=True)
class AlbertQuestionAnsweringOutput:
    start_logits: torch.Tensor  # (B, S)
    end_logits: torch.Tensor  # (B, S)


# The outputs are pytree nodes, so that what walks a module's outputs finds their tensors: FSDP2
# registers its pre-backward hook on them, and on torch 2.11 (which walks pytrees, not dataclasses)
# a model wrapped as one FSDP2 unit otherwise never ran its post-backward: no gradient reached the
# sharded parameters and the model did not learn (tests/pipelines/train/test_gpu.py, on an H100).
for _output in (AlbertModelOutput, AlbertPreTrainingOutput, AlbertQuestionAnsweringOutput):
    torch.utils._pytree.register_dataclass(_output)


class AlbertForPreTraining(nn.Module):
    """ALBERT with the MLM and SOP heads used in pretraining."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, init=False)
        self.predictions = AlbertMLMHead(config)
        self.sop_classifier = AlbertSOPHead(config)
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        masked_positions: torch.Tensor | None = None,
    ) -> AlbertPreTrainingOutput:
        # With masked_positions the head sees (B, P, H): [B, P, V] logits instead of [B, S, V].
        out = self.albert(input_ids, token_type_ids, attention_mask, positions=masked_positions)
        mlm_logits = self.predictions(out.last_hidden_state, self.albert.embeddings.word_embeddings.weight)
        return AlbertPreTrainingOutput(
            mlm_logits=mlm_logits,
            sop_logits=self.sop_classifier(out.pooler_output),
            last_hidden_state=out.last_hidden_state,
        )


class LinearHead(nn.Module):
    """ALBERT, dropout (classifier_dropout_prob) and one linear layer of `outputs` units: the layout
    of transformers' sequence-classification, multiple-choice and token-classification heads."""

    def __init__(self, config: AlbertConfig, outputs: int, add_pooling_layer: bool = True):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, init=False, add_pooling_layer=add_pooling_layer)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, outputs)
        init_weights(self, config)

    def pooled(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        """The pooled [CLS]; the last layer runs only there, all the pooler reads (exact)."""
        none = input_ids.new_zeros((input_ids.shape[0], 0))
        return self.albert(input_ids, token_type_ids, attention_mask, positions=none).pooler_output

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The head on an encoder state (B, S, H): its pooled [CLS], as `forward` reads it -> (B, outputs)."""
        return self.classifier(self.dropout(torch.tanh(self.albert.pooler(x[:, 0]))))


class AlbertForSequenceClassification(LinearHead):
    """ALBERT with dropout and a linear classifier (or regressor) on the pooled output."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, config.num_labels)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.classifier(self.dropout(self.pooled(input_ids, token_type_ids, attention_mask)))  # (B, labels)


class AlbertForQuestionAnswering(nn.Module):
    """ALBERT with a linear start/end scorer at every position (extractive QA), as transformers': no
    pooler, no dropout, the last layer everywhere; padding's logits unmasked (targets and spans stay in the context)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, init=False, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> AlbertQuestionAnsweringOutput:
        return self.read(self.albert(input_ids, token_type_ids, attention_mask).last_hidden_state)

    def read(self, x: torch.Tensor) -> AlbertQuestionAnsweringOutput:
        """The head on an encoder state (B, S, H): start and end logits (B, S) each."""
        logits = self.qa_outputs(x).permute(2, 0, 1).contiguous()  # (B, S, 2) -> (2, B, S)
        return AlbertQuestionAnsweringOutput(start_logits=logits[0], end_logits=logits[1])


@torch.no_grad()
def init_weights(model: nn.Module, config: AlbertConfig) -> None:
    """normal(0, initializer_range) weights, zero biases, LayerNorm 1/0 (every released ALBERT)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.normal_(0.0, config.initializer_range)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.fill_(1.0)
            module.bias.zero_()
        elif isinstance(module, AlbertMLMHead):
            module.bias.zero_()


def num_parameters(model: nn.Module) -> int:
    """Distinct parameters (shared and tied ones once), as transformers counts them."""
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "AlbertModel",
    "AlbertForPreTraining",
    "AlbertForSequenceClassification",
    "AlbertForQuestionAnswering",
    "AlbertPreTrainingOutput",
    "AlbertModelOutput",
    "AlbertQuestionAnsweringOutput",
    "num_parameters",
]
