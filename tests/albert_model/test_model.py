import pytest
import torch
from transformers import AlbertConfig as HFConfig
from transformers import AlbertModel as HFAlbertModel

from albert_model import (
    AlbertConfig,
    AlbertForPreTraining,
    AlbertForSequenceClassification,
    AlbertModel,
    num_parameters,
)

PAPER_COUNTS = {"base": 11_683_584, "large": 17_683_968, "xlarge": 58_724_864, "xxlarge": 222_595_584}


def tiny(**kw) -> AlbertConfig:
    defaults = dict(
        vocab_size=97,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
    )
    return AlbertConfig(**{**defaults, **kw})


@pytest.mark.parametrize("preset", sorted(PAPER_COUNTS))
def test_parameter_counts_equal_transformers(preset):
    config = AlbertConfig.from_preset(preset)
    with torch.device("meta"):
        ours = num_parameters(AlbertModel(config))
        theirs = HFAlbertModel(HFConfig(**config.to_hf_dict())).num_parameters()
    assert ours == theirs == PAPER_COUNTS[preset]


def sublayer_sizes(config: AlbertConfig) -> tuple[int, int]:
    H, I = config.hidden_size, config.intermediate_size
    attention = 4 * (H * H + H) + 2 * H
    ffn = (H * I + I) + (I * H + H) + 2 * H
    return attention, ffn


@pytest.mark.parametrize(
    "sharing, attention_copies, ffn_copies",
    [
        ("all", lambda L, G: G, lambda L, G: G),
        ("attention", lambda L, G: G, lambda L, G: L),
        ("ffn", lambda L, G: L, lambda L, G: G),
        ("none", lambda L, G: L, lambda L, G: L),
    ],
)
@pytest.mark.parametrize("layers, groups, inner", [(2, 1, 1), (6, 1, 1), (6, 2, 1), (6, 3, 2)])
def test_sharing_modes_count_what_they_share(sharing, attention_copies, ffn_copies, layers, groups, inner):
    config = tiny(num_hidden_layers=layers, num_hidden_groups=groups, inner_group_num=inner, sharing=sharing)
    attention, ffn = sublayer_sizes(config)
    outside_layers = num_parameters(AlbertModel(tiny(num_hidden_layers=1))) - (attention + ffn)
    expected = outside_layers + inner * (
        attention_copies(layers, groups) * attention + ffn_copies(layers, groups) * ffn
    )
    assert num_parameters(AlbertModel(config)) == expected


def test_fully_shared_count_does_not_grow_with_depth():
    counts = {L: num_parameters(AlbertModel(tiny(num_hidden_layers=L))) for L in (1, 4, 12)}
    assert len(set(counts.values())) == 1
    unshared = {L: num_parameters(AlbertModel(tiny(num_hidden_layers=L, sharing="none"))) for L in (1, 4)}
    assert unshared[4] > unshared[1]


def test_attention_sharing_reuses_one_module_and_both_steps_train_it():
    model = AlbertModel(tiny(num_hidden_layers=3, sharing="attention"))
    layers = [g.albert_layers[0] for g in model.encoder.albert_layer_groups]
    assert layers[0].attention is layers[1].attention is layers[2].attention
    assert layers[0].ffn is not layers[1].ffn
    ids = torch.randint(5, 97, (2, 7))
    model(ids).last_hidden_state.sum().backward()
    assert layers[0].attention.query.weight.grad is not None
    assert all(layer.ffn.weight.grad is not None for layer in layers)


def test_shared_layer_runs_at_every_depth_step():
    torch.manual_seed(0)
    shallow = AlbertModel(tiny(num_hidden_layers=1)).eval()
    deep = AlbertModel(tiny(num_hidden_layers=3)).eval()
    deep.load_state_dict(shallow.state_dict())  # same weights: the deep one only runs them more
    ids = torch.randint(5, 97, (2, 7))
    with torch.no_grad():
        x = shallow.encoder.embedding_hidden_mapping_in(shallow.embeddings(ids, None))
        layer = shallow.encoder.albert_layer_groups[0]
        expected = layer(layer(layer(x, None), None), None)
        assert torch.allclose(deep(ids).last_hidden_state, expected, atol=1e-6)
        assert not torch.allclose(shallow(ids).last_hidden_state, expected, atol=1e-3)


@pytest.mark.parametrize("kw", [{}, dict(num_hidden_groups=2, inner_group_num=2)])
def test_masked_positions_select_the_full_logits(kw):
    # With positions the last layer runs only there; the result must equal the full computation.
    torch.manual_seed(0)
    model = AlbertForPreTraining(tiny(**kw)).eval()
    ids = torch.randint(5, 97, (3, 9))
    mask = torch.ones_like(ids)
    mask[2, 6:] = 0
    positions = torch.tensor([[1, 4], [2, 3], [0, 5]])
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        sparse = model(ids, attention_mask=mask, masked_positions=positions)
    assert full.mlm_logits.shape == (3, 9, 97) and sparse.mlm_logits.shape == (3, 2, 97)
    gathered = torch.stack([full.mlm_logits[b, positions[b]] for b in range(3)])
    torch.testing.assert_close(sparse.mlm_logits, gathered, atol=1e-5, rtol=0)
    torch.testing.assert_close(sparse.sop_logits, full.sop_logits, atol=1e-6, rtol=0)
    assert full.sop_logits.shape == (3, 2)


def test_decoder_is_tied_to_word_embeddings():
    model = AlbertForPreTraining(tiny())
    ids = torch.randint(5, 97, (2, 5))
    model(ids, masked_positions=torch.tensor([[1], [2]])).mlm_logits.sum().backward()
    grad = model.albert.embeddings.word_embeddings.weight.grad
    assert grad is not None
    assert grad[~torch.isin(torch.arange(97), ids)].abs().sum() > 0  # only the decoder reaches these rows
    assert not any(name.startswith("predictions.decoder") for name, _ in model.named_parameters())


def test_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    model = AlbertModel(tiny()).eval()
    ids = torch.randint(5, 97, (1, 6))
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], dim=1)
    mask = torch.cat([torch.ones(1, 6), torch.zeros(1, 4)], dim=1).long()
    with torch.no_grad():
        alone = model(ids)
        with_pad = model(padded, attention_mask=mask)
        unmasked = model(padded)
    assert torch.allclose(alone.last_hidden_state, with_pad.last_hidden_state[:, :6], atol=1e-5)
    assert torch.allclose(alone.pooler_output, with_pad.pooler_output, atol=1e-5)
    assert not torch.allclose(alone.pooler_output, unmasked.pooler_output, atol=1e-4)


def test_token_types_matter_and_default_to_zero():
    torch.manual_seed(0)
    model = AlbertModel(tiny()).eval()
    ids = torch.randint(5, 97, (2, 6))
    with torch.no_grad():
        default = model(ids).last_hidden_state
        zeros = model(ids, token_type_ids=torch.zeros_like(ids)).last_hidden_state
        ones = model(ids, token_type_ids=torch.ones_like(ids)).last_hidden_state
    assert torch.allclose(default, zeros, atol=1e-6)
    assert not torch.allclose(default, ones, atol=1e-4)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny(hidden_dropout_prob=0.3, num_labels=3))
    ids = torch.randint(5, 97, (4, 8))
    model.train()
    assert not torch.allclose(model(ids), model(ids))
    model.eval()
    logits = model(ids)
    assert logits.shape == (4, 3)
    assert torch.allclose(logits, model(ids))


def test_initialisation_follows_the_reference():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=3000))
    std = model.albert.embeddings.word_embeddings.weight.std().item()
    assert abs(std - 0.02) < 0.001
    ln = model.albert.encoder.albert_layer_groups[0].albert_layers[0].full_layer_layer_norm
    assert torch.all(ln.weight == 1) and torch.all(ln.bias == 0)
    assert torch.all(model.predictions.bias == 0)
    assert torch.all(model.albert.pooler.bias == 0)


@pytest.mark.gpu
def test_bf16_autocast_on_cuda_stays_close_to_fp32():
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=1000)).cuda().eval()
    ids = torch.randint(5, 1000, (4, 64), device="cuda")
    positions = torch.arange(1, 11, device="cuda").expand(4, -1)
    with torch.no_grad():
        fp32 = model(ids, masked_positions=positions).mlm_logits
        with torch.autocast("cuda", dtype=torch.bfloat16):
            bf16 = model(ids, masked_positions=positions).mlm_logits
    assert (bf16.float() - fp32).abs().max().item() < 0.05 * fp32.abs().max().item()
