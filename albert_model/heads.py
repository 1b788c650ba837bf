"""The task heads beyond classification and extractive QA, each laid out as transformers' class of
the same name (same parameter names, same dropout), so exports load there and back: multiple
choice (a score per choice from the pooled [CLS] of each choice's sequence) and token
classification (a label per position)."""

from __future__ import annotations

import torch
from torch import nn

from .config import AlbertConfig
from .model import AlbertModel, init_weights


class AlbertForMultipleChoice(nn.Module):
    """ALBERT scoring each of a question's choices: every (context, choice) pair is one sequence,
    dropout (classifier_dropout_prob) and one linear unit on its pooled output; the choices'
    scores are the logits of a softmax over choices. Inputs are (B, C, S); logits (B, C)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, init=False)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, 1)
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, choices, width = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(batch * choices, width)

        ids = flat(input_ids)
        # No positions beyond [CLS]: the last layer runs only there, all the pooler reads (exact).
        none = ids.new_zeros((ids.shape[0], 0))
        pooled = self.albert(ids, flat(token_type_ids), flat(attention_mask), positions=none).pooler_output
        return self.classifier(self.dropout(pooled)).view(batch, choices)


class AlbertForTokenClassification(nn.Module):
    """ALBERT labelling every position (named entities, parts of speech): no pooler, dropout
    (classifier_dropout_prob) and a linear classifier on each position's last hidden state.
    Logits (B, S, num_labels); padding positions get logits too, left out by the loss."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, init=False, add_pooling_layer=False)
        self.dropout = nn.Dropout(config.classifier_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        init_weights(self, config)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.albert(input_ids, token_type_ids, attention_mask).last_hidden_state  # (B, S, H)
        return self.classifier(self.dropout(x))
