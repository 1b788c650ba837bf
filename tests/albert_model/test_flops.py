import pytest

from albert_model import AlbertConfig, AlbertModel, num_parameters
from albert_model.flops import mfu, training_flops_per_token


def test_base_flops_match_the_reference_formula_by_hand():
    config = AlbertConfig.from_preset("base")
    H, E, V, I, L, S = 768, 128, 30000, 3072, 12, 128
    expected = L * (6 * (4 * H * H + 2 * H * I) + 12 * S * H) + 6 * E * H + 0.15 * 6 * (H * E + E * V)
    assert training_flops_per_token(config, S, mlm_fraction=0.15) == pytest.approx(expected)


def test_flops_count_every_application_of_shared_weights():
    shallow = AlbertConfig.from_preset("tiny", num_hidden_layers=2)
    deep = shallow.replace(num_hidden_layers=8)
    assert num_parameters(AlbertModel(shallow)) == num_parameters(AlbertModel(deep))
    per_layer = training_flops_per_token(deep, 64) - training_flops_per_token(shallow, 64)
    assert per_layer == pytest.approx(
        6 * (training_flops_per_token(shallow, 64) - training_flops_per_token(shallow.replace(num_hidden_layers=1), 64))
    )
    inner = shallow.replace(inner_group_num=2)
    assert training_flops_per_token(inner, 64) > training_flops_per_token(shallow, 64)


def test_mfu_and_bad_fraction():
    assert mfu(1000.0, 1e9, 4e12) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="mlm_fraction"):
        training_flops_per_token(AlbertConfig(), 128, mlm_fraction=1.5)
