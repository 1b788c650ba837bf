"""Reading the shared layer's state at every depth: ALBERT applies one layer num_hidden_layers
times, and after each application the sequence head can read [CLS] as it reads the last (no new
parameter), as a head at every position can read each. Depth distillation matches those states
(any head); early exit (PABEE, Zhou et al. 2020) stops applying the layer once the sequence head's
answer settles."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .model import AlbertForSequenceClassification, AlbertModel, padding_mask


def step_states(
    albert: AlbertModel,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> list[torch.Tensor]:
    """The encoder's state after each application of its layers, (B, S, H) each; the last is
    forward's last_hidden_state."""
    return albert.encoder.step_states(albert.embeddings(input_ids, token_type_ids), padding_mask(attention_mask))


def read_state(head: nn.Module, state: torch.Tensor) -> Any:
    """The head on one depth's state (B, S, H), as its forward reads the last (each head's `read`):
    a sequence head's pooled [CLS] -> (B, labels); token classification's and question answering's
    every position."""
    return head.read(state)


def depth_logits(
    head: AlbertForSequenceClassification,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The logits the head reads at every depth: (D, B, labels), the last forward's."""
    states = step_states(head.albert, input_ids, token_type_ids, attention_mask)
    return torch.stack([read_state(head, state) for state in states])


@dataclass(frozen=True)
class ExitRule:
    """When a row stops: after `patience` further depths with the same prediction (PABEE), or once
    its prediction's entropy falls below `entropy` (DeeBERT); at the last depth otherwise."""

    patience: int | None = None
    entropy: float | None = None
    independent: bool = False
    """A sigmoid per class: the prediction is the set of classes with a positive logit, not the argmax."""

    def prediction(self, logits: torch.Tensor) -> torch.Tensor:
        return logits > 0 if self.independent else logits.argmax(-1, keepdim=True)

    def uncertainty(self, logits: torch.Tensor) -> torch.Tensor:
        """Entropy in nats: of the softmax, or each sigmoid's averaged over the classes."""
        if self.independent:
            p = torch.sigmoid(logits)
            return -(
                p * torch.nn.functional.logsigmoid(logits) + (1 - p) * torch.nn.functional.logsigmoid(-logits)
            ).mean(-1)
        log_p = torch.log_softmax(logits, -1)
        return -(log_p.exp() * log_p).sum(-1)


@torch.no_grad()
def early_exit(
    head: AlbertForSequenceClassification,
    rule: ExitRule,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's logits at the depth it exits at under `rule`, and that depth (1-based): (B,
    labels), (B,). A row that exits leaves the batch, so later depths run on the rows left only."""
    albert, encoder = head.albert, head.albert.encoder
    depth = encoder.config.num_hidden_layers
    x = encoder.embedding_hidden_mapping_in(albert.embeddings(input_ids, token_type_ids))
    mask = padding_mask(attention_mask)
    rows = torch.arange(len(input_ids), device=input_ids.device)
    exited = torch.full((len(input_ids),), depth, dtype=torch.long, device=input_ids.device)
    answers, previous, streak = None, None, torch.zeros_like(rows)
    for step in range(depth):
        last = step == depth - 1
        # the last application runs at [CLS] only: all the head reads (as forward's)
        cls = rows.new_zeros((len(rows), 1)) if last else None
        x = encoder.albert_layer_groups[encoder.group_of_step(step)](x, mask, cls)
        logits = read_state(head, x)
        if answers is None:
            answers = logits.new_zeros((len(input_ids), logits.shape[-1]))
        predicted = rule.prediction(logits)
        if previous is not None:
            streak = torch.where((predicted == previous).all(-1), streak + 1, 0)
        done = torch.full_like(rows, last, dtype=torch.bool)
        if rule.patience is not None:
            done |= streak >= rule.patience
        if rule.entropy is not None:
            done |= rule.uncertainty(logits) < rule.entropy
        answers[rows[done]] = logits[done]
        exited[rows[done]] = step + 1
        keep = ~done
        if not keep.any():
            break
        x, rows, previous, streak = x[keep], rows[keep], predicted[keep], streak[keep]
        mask = mask[keep] if mask is not None else None
    return answers, exited


__all__ = ["ExitRule", "depth_logits", "early_exit", "read_state", "step_states"]
