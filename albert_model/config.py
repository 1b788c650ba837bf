"""AlbertConfig: the model's hyperparameters, presets and the mapping to transformers' config."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

SHARING_MODES = ("all", "attention", "ffn", "none")
ACTIVATIONS = ("gelu_new", "gelu", "relu", "silu")

# ALBERT v2 sizes (paper Table 1; v2 drops dropout). `tiny` is this project's CPU-sized model.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(embedding_size=64, hidden_size=128, num_hidden_layers=4, num_attention_heads=2, intermediate_size=512),
    "base": dict(
        embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072
    ),
    "large": dict(
        embedding_size=128, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096
    ),
    "xlarge": dict(
        embedding_size=128, hidden_size=2048, num_hidden_layers=24, num_attention_heads=16, intermediate_size=8192
    ),
    "xxlarge": dict(
        embedding_size=128, hidden_size=4096, num_hidden_layers=12, num_attention_heads=64, intermediate_size=16384
    ),
}

# transformers' AlbertConfig keys that have no field here, with the value our model implies.
_HF_FIXED = {
    "model_type": "albert",
    "architectures": None,
    "pad_token_id": 0,
    "bos_token_id": 2,
    "eos_token_id": 3,
    "tie_word_embeddings": True,
}


@dataclass
class AlbertConfig:
    """ALBERT hyperparameters. Field names are transformers' (`AlbertConfig`) plus `sharing`."""

    vocab_size: int = 30000
    """Number of SentencePiece pieces (rows of the word embedding)."""
    embedding_size: int = 128
    """E: width of the factorized token embedding, projected to hidden_size."""
    hidden_size: int = 768
    """H: width of the transformer layers."""
    num_hidden_layers: int = 12
    """Number of layer applications (depth); with sharing they reuse the same weights."""
    num_attention_heads: int = 12
    """Attention heads per layer; must divide hidden_size."""
    intermediate_size: int = 3072
    """Width of the feed-forward layer."""
    num_hidden_groups: int = 1
    """Number of distinct parameter groups; depth step i uses group i * groups // layers."""
    inner_group_num: int = 1
    """Layers inside one group, run one after the other at every depth step."""
    hidden_act: str = "gelu_new"
    """Activation of the FFN and MLM head: gelu_new (tanh approximation), gelu, relu or silu."""
    hidden_dropout_prob: float = 0.0
    """Dropout on embeddings and sublayer outputs (v1 used 0.1, v2 uses 0)."""
    attention_probs_dropout_prob: float = 0.0
    """Dropout on attention probabilities."""
    max_position_embeddings: int = 512
    """Longest sequence the position embedding covers."""
    type_vocab_size: int = 2
    """Number of token types (segments A and B)."""
    initializer_range: float = 0.02
    """Standard deviation of the normal weight initialisation."""
    layer_norm_eps: float = 1e-12
    """Epsilon of every LayerNorm."""
    classifier_dropout_prob: float = 0.1
    """Dropout before the sequence-classification head."""
    num_labels: int = 2
    """Outputs of the sequence-classification head."""
    sharing: str = "all"
    """Cross-layer sharing (paper's ablation): all, attention (only), ffn (only) or none."""

    def __post_init__(self) -> None:
        def require(ok: bool, name: str, why: str) -> None:
            if not ok:
                raise ValueError(f"AlbertConfig.{name}={getattr(self, name)!r}: {why}")

        for name in (
            "vocab_size",
            "embedding_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "num_hidden_groups",
            "inner_group_num",
            "max_position_embeddings",
            "type_vocab_size",
            "num_labels",
        ):
            value = getattr(self, name)
            require(
                isinstance(value, int) and not isinstance(value, bool) and value > 0, name, "must be a positive integer"
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob"):
            require(0.0 <= getattr(self, name) < 1.0, name, "must be in [0, 1)")
        require(self.initializer_range > 0, "initializer_range", "must be positive")
        require(self.layer_norm_eps > 0, "layer_norm_eps", "must be positive")
        require(
            self.hidden_size % self.num_attention_heads == 0,
            "hidden_size",
            f"must be divisible by num_attention_heads={self.num_attention_heads}",
        )
        require(
            self.num_hidden_groups <= self.num_hidden_layers,
            "num_hidden_groups",
            f"must not exceed num_hidden_layers={self.num_hidden_layers}",
        )
        require(self.hidden_act in ACTIVATIONS, "hidden_act", f"must be one of {ACTIVATIONS}")
        require(self.sharing in SHARING_MODES, "sharing", f"must be one of {SHARING_MODES}")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> AlbertConfig:
        """A released ALBERT v2 size (or `tiny`), with any field overridden."""
        if name not in PRESETS:
            raise ValueError(f"unknown ALBERT preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> AlbertConfig:
        return dataclasses.replace(self, **changes)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def group_of_step(self, step: int) -> int:
        """The sharing group used at depth step `step` (integer arithmetic, no float rounding)."""
        return step * self.num_hidden_groups // self.num_hidden_layers

    def hf_group_of_step(self, step: int) -> int:
        """The group transformers uses at `step`; its float division can round differently."""
        return int(step / (self.num_hidden_layers / self.num_hidden_groups))

    def check_hf_grouping(self) -> None:
        """Fail where transformers would assign a depth step to another group than we do."""
        bad = [i for i in range(self.num_hidden_layers) if self.group_of_step(i) != self.hf_group_of_step(i)]
        if bad:
            raise ValueError(
                f"AlbertConfig.num_hidden_groups={self.num_hidden_groups} with num_hidden_layers="
                f"{self.num_hidden_layers}: transformers' float group index differs from the exact one "
                f"at steps {bad}, so the same weights would compute something else there"
            )

    def to_hf_dict(self) -> dict[str, Any]:
        """transformers' `AlbertConfig` keys. Only sharing "all" and "none" exist there."""
        if self.sharing not in ("all", "none"):
            raise ValueError(
                f"AlbertConfig.sharing={self.sharing!r} has no transformers equivalent; "
                "only 'all' and 'none' can be exported"
            )
        groups = self.num_hidden_groups if self.sharing == "all" else self.num_hidden_layers
        hf_config = self.replace(sharing="all", num_hidden_groups=groups)
        hf_config.check_hf_grouping()
        out = {f.name: getattr(hf_config, f.name) for f in dataclasses.fields(self) if f.name != "sharing"}
        out.update(_HF_FIXED)
        return out

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> AlbertConfig:
        """From transformers' config (a `config.json` dict); unknown keys are ignored."""
        if d.get("model_type", "albert") != "albert":
            raise ValueError(f"config model_type={d.get('model_type')!r} is not an ALBERT config")
        names = {f.name for f in dataclasses.fields(cls)} - {"sharing", "num_labels"}
        kwargs = {k: d[k] for k in names if k in d}
        if "id2label" in d:
            kwargs["num_labels"] = len(d["id2label"])
        elif "num_labels" in d:
            kwargs["num_labels"] = d["num_labels"]
        config = cls(**kwargs)
        config.check_hf_grouping()
        return config


__all__ = ["AlbertConfig", "PRESETS", "SHARING_MODES"]
