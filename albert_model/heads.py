"""The task heads beyond classification and extractive QA, each laid out as transformers' class of
the same name (same parameter names, same dropout), so exports load there and back: multiple
choice (a score per choice from the pooled [CLS] of each choice's sequence) and token
classification (a label per position)."""

from __future__ import annotations

import torch

from .config import AlbertConfig
from .model import LinearHead


class AlbertForMultipleChoice(LinearHead):
    """ALBERT scoring each of a question's choices: every (context, choice) pair is one sequence,
    dropout (classifier_dropout_prob) and one linear unit on its pooled output; the choices'
    scores are the logits of a softmax over choices. Inputs are (B, C, S); logits (B, C). `read`
    (LinearHead's) scores each sequence's state: (B * C, S, H) -> (B * C, 1)."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, 1)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, choices, width = input_ids.shape

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.reshape(batch * choices, width)

        pooled = self.pooled(flat(input_ids), flat(token_type_ids), flat(attention_mask))
        return self.classifier(self.dropout(pooled)).view(batch, choices)


class AlbertForTokenClassification(LinearHead):
    """ALBERT labelling every position (named entities, parts of speech): no pooler, dropout
    (classifier_dropout_prob) and a linear classifier on each position's last hidden state.
    Logits (B, S, num_labels); padding positions get logits too, left out by the loss."""

    def __init__(self, config: AlbertConfig):
        super().__init__(config, config.num_labels, add_pooling_layer=False)

    def forward(
        self,
        input_ids: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return self.read(self.albert(input_ids, token_type_ids, attention_mask).last_hidden_state)

    def read(self, x: torch.Tensor) -> torch.Tensor:
        """The head on an encoder state (B, S, H) -> (B, S, num_labels)."""
        return self.classifier(self.dropout(x))
