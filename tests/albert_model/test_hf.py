"""Checkpoint parity against the real transformers ALBERT, in both directions."""

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from albert_model import AlbertConfig, AlbertForPreTraining, AlbertForSequenceClassification, AlbertModel
from albert_model.hf import load_hf_pretrained, save_hf_pretrained, to_hf_state_dict
from tests.pickled_weights import pickled_model_dir

ATOL = 1e-5

CONFIGS = {
    "E<H": dict(embedding_size=16, hidden_size=48),
    "E==H": dict(embedding_size=48, hidden_size=48),
    "groups>1": dict(embedding_size=16, hidden_size=48, num_hidden_layers=6, num_hidden_groups=3),
    "inner>1": dict(embedding_size=16, hidden_size=48, num_hidden_layers=3, inner_group_num=2),
    "groups+inner": dict(
        embedding_size=24,
        hidden_size=48,
        num_hidden_layers=4,
        num_hidden_groups=2,
        inner_group_num=2,
        hidden_act="gelu",
    ),
    "unshared": dict(embedding_size=16, hidden_size=48, num_hidden_layers=3, sharing="none"),
}


def make_config(**kw) -> AlbertConfig:
    base = dict(
        vocab_size=113, num_hidden_layers=3, num_attention_heads=4, intermediate_size=96, max_position_embeddings=32
    )
    return AlbertConfig(**{**base, **kw})


def batch(vocab: int = 113):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, vocab, (3, 12), generator=g)
    token_types = torch.zeros_like(ids)
    token_types[:, 6:] = 1
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # padded batch: rows of different lengths
    mask[2, 5:] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, token_types, mask


def hf_model(config: AlbertConfig, cls_name: str):
    hf_config = transformers.AlbertConfig(**config.to_hf_dict(), attn_implementation="sdpa")
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(hf_config).eval()
    # Give every parameter non-trivial values (LayerNorms and biases start at 1/0).
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def assert_pretraining_parity(hf, ours):
    ids, token_types, mask = batch()
    with torch.no_grad():
        theirs = hf(input_ids=ids, token_type_ids=token_types, attention_mask=mask, output_hidden_states=True)
        mine = ours.eval()(ids, token_types, mask)
    torch.testing.assert_close(mine.last_hidden_state, theirs.hidden_states[-1], atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.mlm_logits, theirs.prediction_logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.sop_logits, theirs.sop_logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_transformers_checkpoint_loads_into_ours_with_equal_outputs(name, tmp_path):
    config = make_config(**CONFIGS[name])
    hf = hf_model(config, "AlbertForPreTraining")
    hf.save_pretrained(tmp_path)
    ours = load_hf_pretrained(tmp_path)
    assert isinstance(ours, AlbertForPreTraining)
    assert ours.config.to_hf_dict() == config.to_hf_dict()
    assert_pretraining_parity(hf, ours)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_our_export_loads_in_transformers_with_no_missing_keys(name, tmp_path):
    config = make_config(**CONFIGS[name])
    torch.manual_seed(0)
    ours = AlbertForPreTraining(config)
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    save_hf_pretrained(ours, tmp_path)
    hf, info = transformers.AlbertForPreTraining.from_pretrained(
        tmp_path, output_loading_info=True, attn_implementation="sdpa"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_pretraining_parity(hf.eval(), ours)


def test_bare_model_and_classifier_round_trip(tmp_path):
    config = make_config(embedding_size=16, hidden_size=48, num_labels=3)
    ids, token_types, mask = batch()
    hf_bare = hf_model(config, "AlbertModel")
    hf_bare.save_pretrained(tmp_path / "bare")
    ours_bare = load_hf_pretrained(tmp_path / "bare").eval()
    assert type(ours_bare) is AlbertModel
    with torch.no_grad():
        theirs = hf_bare(input_ids=ids, token_type_ids=token_types, attention_mask=mask)
        mine = ours_bare(ids, token_types, mask)
    torch.testing.assert_close(mine.last_hidden_state, theirs.last_hidden_state, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.pooler_output, theirs.pooler_output, atol=ATOL, rtol=0)

    ours_cls = AlbertForSequenceClassification(config).eval()
    save_hf_pretrained(ours_cls, tmp_path / "cls", id2label={0: "a", 1: "b", 2: "c"})
    hf_cls, info = transformers.AlbertForSequenceClassification.from_pretrained(
        tmp_path / "cls", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert hf_cls.config.id2label == {0: "a", 1: "b", 2: "c"}
    with torch.no_grad():
        torch.testing.assert_close(
            ours_cls(ids, token_types, mask),
            hf_cls.eval()(input_ids=ids, token_type_ids=token_types, attention_mask=mask).logits,
            atol=ATOL,
            rtol=0,
        )
    assert isinstance(load_hf_pretrained(tmp_path / "cls"), AlbertForSequenceClassification)


def test_safetensors_file_holds_transformers_names_without_tied_copies(tmp_path):
    model = AlbertForPreTraining(make_config())
    save_hf_pretrained(model, tmp_path)
    names = set(load_file(tmp_path / "model.safetensors"))
    assert "albert.encoder.albert_layer_groups.0.albert_layers.0.attention.query.weight" in names
    assert "albert.encoder.albert_layer_groups.0.albert_layers.0.ffn_output.bias" in names
    assert "predictions.decoder.weight" not in names
    tied = to_hf_state_dict(model)["predictions.decoder.weight"]
    assert tied.data_ptr() == model.albert.embeddings.word_embeddings.weight.data_ptr()
    assert json.loads((tmp_path / "config.json").read_text())["architectures"] == ["AlbertForPreTraining"]


def test_legacy_pytorch_bin_loads_with_weights_only(tmp_path):
    config = make_config()
    hf = hf_model(config, "AlbertForPreTraining")
    hf.config.architectures = ["AlbertForPreTraining"]
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    assert_pretraining_parity(hf, load_hf_pretrained(tmp_path))


def test_a_pytorch_bin_holding_more_than_tensors_is_refused_in_one_line_unrun(tmp_path):
    """Issue #43: torch's refusal was a traceback of several paragraphs; it is one ValueError naming
    the file and what to do, and the pickled call never runs."""
    config = make_config()
    model = AlbertForPreTraining(config)
    save_hf_pretrained(model, tmp_path / "safe")
    folder = pickled_model_dir(tmp_path / "safe", tmp_path / "pickled", tmp_path / "sentinel")
    with pytest.raises(ValueError) as refused:
        load_hf_pretrained(folder)
    message = str(refused.value)
    assert message.startswith(f"{folder / 'pytorch_model.bin'}: not loaded: it holds pickled objects other than ")
    assert "convert it to safetensors" in message and "\n" not in message and len(message) < 400, message
    assert not (tmp_path / "sentinel").exists()


def test_missing_and_unexpected_weights_are_named(tmp_path):
    config = make_config()
    masked_lm = hf_model(config, "AlbertForMaskedLM")  # no SOP head, no pooler
    masked_lm.save_pretrained(tmp_path / "mlm")
    with pytest.raises(ValueError, match="sop_classifier.classifier.weight"):
        load_hf_pretrained(tmp_path / "mlm", AlbertForPreTraining)
    continued = load_hf_pretrained(tmp_path / "mlm", AlbertForPreTraining, strict=False)
    torch.testing.assert_close(continued.predictions.dense.weight, masked_lm.predictions.dense.weight)

    pretraining = hf_model(config, "AlbertForPreTraining")
    pretraining.save_pretrained(tmp_path / "pre")
    with pytest.raises(ValueError, match="does not have.*predictions.dense.weight"):
        load_hf_pretrained(tmp_path / "pre", AlbertForSequenceClassification)
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_hf_pretrained(tmp_path / "nowhere")


PAIR = ("The minister said the vote would take place next week.", "Shares rose after the bank reported profits.")


@pytest.mark.parametrize("tokenizer_class", ["AutoTokenizer", "AlbertTokenizer"])
def test_the_exported_tokenizer_feeds_segment_ids_and_cuts_at_the_training_length(
    tiny_pretrained, tmp_path, tokenizer_class
):
    """transformers 5's AlbertTokenizer leaves token_type_ids out of its outputs unless
    tokenizer_config.json names them (transformers#48128): a text pair was fed all-zero segment ids.
    Loaded as the README shows, an export's tokenizer gives fine-tuning's ids and segment ids, and
    truncates at the length the model was trained at."""
    from pipelines.finetuning.tokenizer import PairTokenizer
    from tests.conftest import VOCAB_SIZE

    spiece = Path(tiny_pretrained) / "spiece.model"
    model = AlbertForSequenceClassification(make_config(vocab_size=VOCAB_SIZE, max_position_embeddings=64))
    folder = save_hf_pretrained(model, tmp_path / "export", spiece_model=spiece, max_seq_length=24)
    tokenizer = getattr(transformers, tokenizer_class).from_pretrained(folder)
    ours = PairTokenizer(str(folder))
    ids, types = ours.encode(*PAIR, 1000)
    assert 1 in types and len(ids) > 24
    encoded = tokenizer(*PAIR)
    assert (encoded["input_ids"], encoded["token_type_ids"]) == (ids, types)
    assert tokenizer.model_max_length == 24
    cut = tokenizer(*PAIR, truncation=True)
    assert (cut["input_ids"], cut["token_type_ids"]) == ours.encode(*PAIR, 24)
