"""The ALBERT paper's Figure 1: how far each layer moves its input, as L2 distance and cosine similarity.

For every depth step the step's input and output hidden states are compared token by token (padding
left out) and averaged over tokens. With cross-layer sharing the paper finds the transitions
smoother than BERT's: distances and similarities oscillate rather than converge.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from albert_model.model import padding_mask


@dataclass
class LayerTransition:
    step: int
    """Depth step (0 = the first layer application)."""
    l2_distance: float
    """Mean over tokens of ||output - input||_2."""
    cosine_similarity: float
    """Mean over tokens of cos(input, output)."""


@torch.no_grad()
def layer_transitions(
    model: torch.nn.Module, input_ids: torch.Tensor, token_type_ids: torch.Tensor, attention_mask: torch.Tensor
) -> list[LayerTransition]:
    """Drive the embeddings and each depth step of `model` (AlbertModel or a model holding one as
    `.albert`) over a padded batch [B, S] and compare every step's input with its output."""
    albert = getattr(model, "albert", model)
    albert.eval()
    encoder = albert.encoder
    mask = padding_mask(attention_mask)
    tokens = attention_mask.bool()  # (B, S)
    h = encoder.embedding_hidden_mapping_in(albert.embeddings(input_ids, token_type_ids))  # (B, S, H)
    transitions = []
    for step in range(encoder.config.num_hidden_layers):
        out = encoder.albert_layer_groups[encoder.group_of_step(step)](h, mask)  # (B, S, H)
        distance = (out - h).norm(dim=-1)[tokens]  # (tokens,)
        cosine = F.cosine_similarity(out, h, dim=-1)[tokens]
        transitions.append(LayerTransition(step, distance.mean().item(), cosine.mean().item()))
        h = out
    return transitions


def pad_examples(examples: list[dict]) -> dict[str, torch.Tensor]:
    """Right-pad `input_ids` / `token_type_ids` lists (pad id 0) into tensors with an attention mask."""
    width = max(len(e["input_ids"]) for e in examples)
    input_ids = torch.zeros(len(examples), width, dtype=torch.long)
    token_type_ids = torch.zeros_like(input_ids)
    attention_mask = torch.zeros_like(input_ids)
    for i, e in enumerate(examples):
        n = len(e["input_ids"])
        input_ids[i, :n] = torch.as_tensor(e["input_ids"])
        token_type_ids[i, :n] = torch.as_tensor(e["token_type_ids"])
        attention_mask[i, :n] = 1
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "attention_mask": attention_mask}


def unmask(example: dict) -> dict:
    """The example with its original tokens back at the statically masked positions."""
    ids = list(example["input_ids"])
    for position, original in zip(example.get("masked_lm_positions") or [], example.get("masked_lm_ids") or []):
        ids[position] = original
    return {**example, "input_ids": ids}
