import pytest

from albert_model import PRESETS, AlbertConfig


def test_presets_build_and_match_paper_sizes():
    base = AlbertConfig.from_preset("base")
    assert (base.hidden_size, base.num_hidden_layers, base.num_attention_heads, base.intermediate_size) == (
        768,
        12,
        12,
        3072,
    )
    xxl = AlbertConfig.from_preset("xxlarge")
    assert (xxl.hidden_size, xxl.num_attention_heads, xxl.intermediate_size) == (4096, 64, 16384)
    for name in PRESETS:
        config = AlbertConfig.from_preset(name)
        assert config.hidden_dropout_prob == 0.0  # v2 values
        assert config.embedding_size <= config.hidden_size


def test_preset_overrides_and_unknown_preset():
    assert AlbertConfig.from_preset("tiny", vocab_size=1234).vocab_size == 1234
    with pytest.raises(ValueError, match="unknown ALBERT preset 'huge'"):
        AlbertConfig.from_preset("huge")


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(hidden_size=100, num_attention_heads=12), "hidden_size=100"),
        (dict(sharing="layers"), "sharing='layers'"),
        (dict(hidden_act="swish2"), "hidden_act='swish2'"),
        (dict(num_hidden_layers=0), "num_hidden_layers=0"),
        (dict(num_hidden_groups=13), "num_hidden_groups=13"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob=1.5"),
        (dict(vocab_size=3.5), "vocab_size=3.5"),
    ],
)
def test_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=f"AlbertConfig.{field}"):
        AlbertConfig(**kwargs)


def test_group_index_is_integer_arithmetic():
    config = AlbertConfig(num_hidden_layers=12, num_hidden_groups=4)
    assert [config.group_of_step(i) for i in range(12)] == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3


def test_hf_dict_round_trip():
    config = AlbertConfig.from_preset("tiny", num_hidden_groups=2, inner_group_num=2, num_labels=5)
    d = config.to_hf_dict()
    assert d["model_type"] == "albert" and d["num_hidden_groups"] == 2 and "sharing" not in d
    assert AlbertConfig.from_hf_dict(d) == config


def test_hf_dict_of_unshared_model_has_one_group_per_layer():
    d = AlbertConfig.from_preset("tiny", sharing="none").to_hf_dict()
    assert d["num_hidden_groups"] == d["num_hidden_layers"] == 4


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_cannot_be_exported(sharing):
    with pytest.raises(ValueError, match="no transformers equivalent"):
        AlbertConfig.from_preset("tiny", sharing=sharing).to_hf_dict()


def test_float_group_rounding_of_transformers_is_refused():
    # transformers computes int(9 / (18 / 14)) = 6, the exact index 9 * 14 // 18 is 7.
    config = AlbertConfig(num_hidden_layers=18, num_hidden_groups=14)
    assert config.group_of_step(9) == 7 and config.hf_group_of_step(9) == 6
    with pytest.raises(ValueError, match=r"steps \[9\]"):
        config.to_hf_dict()


def test_from_hf_dict_rejects_other_models_and_reads_labels():
    with pytest.raises(ValueError, match="model_type='bert'"):
        AlbertConfig.from_hf_dict({"model_type": "bert"})
    config = AlbertConfig.from_hf_dict({"model_type": "albert", "id2label": {"0": "a", "1": "b", "2": "c"}})
    assert config.num_labels == 3
