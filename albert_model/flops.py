"""Training FLOPs per token for ALBERT, counting every application of a shared layer.

Counting `model.parameters()` once (as torchtitan and composer do) undercounts ALBERT by about
num_hidden_layers times, because the same weights run at every depth step.
"""

from __future__ import annotations

from .config import AlbertConfig


def training_flops_per_token(config: AlbertConfig, seq_length: int, mlm_fraction: float = 1.0) -> float:
    """Forward + backward FLOPs per input token (the factor 6 = 2 forward + 4 backward).

    L applications of [QKV+output projections 4H^2 and FFN 2*H*I] and attention scores and
    mixing (2*S*H each), the E->H projection, and the MLM head (H->E plus the tied E->V decoder)
    on the `mlm_fraction` of tokens it runs on (1.0 for a full-sequence head; the share of masked
    positions when it runs only there). Embedding lookups, LayerNorms, the pooler and the SOP head
    are negligible and not counted.
    """
    if not 0.0 <= mlm_fraction <= 1.0:
        raise ValueError(f"mlm_fraction={mlm_fraction}: must be in [0, 1]")
    H, E, V, I = config.hidden_size, config.embedding_size, config.vocab_size, config.intermediate_size
    applications = config.num_hidden_layers * config.inner_group_num
    per_layer = 6 * (4 * H * H + 2 * H * I) + 12 * seq_length * H
    mlm_head = 6 * (H * E + E * V)
    return applications * per_layer + 6 * E * H + mlm_fraction * mlm_head


def mfu(tokens_per_second: float, flops_per_token: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the device's peak FLOP/s."""
    return tokens_per_second * flops_per_token / peak_flops


__all__ = ["training_flops_per_token", "mfu"]
