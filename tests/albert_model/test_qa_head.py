"""The extractive question-answering head against transformers' AlbertForQuestionAnswering: equal
start/end logits, export and import both ways, a pretrained encoder under a fresh head, and the
exported folder in transformers' question-answering pipeline."""

import json
from pathlib import Path

import pytest
import torch
import transformers

from albert_model import (
    AlbertConfig,
    AlbertForPreTraining,
    AlbertForQuestionAnswering,
    AlbertForSequenceClassification,
    AlbertModel,
)
from albert_model.hf import apply_pretrained_encoder, load_hf_pretrained, save_hf_pretrained, to_hf_state_dict

from .test_hf import ATOL, batch, hf_model, make_config

CONFIGS = {
    "E<H": dict(embedding_size=16, hidden_size=48),
    "groups+inner": dict(
        embedding_size=24, hidden_size=48, num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2
    ),
}


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Every parameter moved off its initial value (LayerNorms and biases start at 1/0)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval()


def assert_qa_parity(ours: AlbertForQuestionAnswering, hf: torch.nn.Module) -> None:
    ids, token_types, mask = batch()  # padded rows, segments A and B
    with torch.no_grad():
        mine = ours.eval()(ids, token_types, mask)
        theirs = hf.eval()(input_ids=ids, token_type_ids=token_types, attention_mask=mask)
    assert mine.start_logits.shape == mine.end_logits.shape == ids.shape
    torch.testing.assert_close(mine.start_logits, theirs.start_logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(mine.end_logits, theirs.end_logits, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_same_weights_give_transformers_start_and_end_logits(name):
    config = make_config(**CONFIGS[name])
    torch.manual_seed(0)
    ours = perturbed(AlbertForQuestionAnswering(config))
    assert ours.albert.pooler is None  # as transformers': no weights outside its layout
    hf = transformers.AlbertForQuestionAnswering(
        transformers.AlbertConfig(**{**config.to_hf_dict(), "num_labels": 2}, attn_implementation="sdpa")
    )
    hf.load_state_dict(to_hf_state_dict(ours), strict=True)
    assert_qa_parity(ours, hf)


def test_padding_positions_keep_their_logits_as_in_transformers():
    """Not masked (transformers does not mask them): the positions exist, and the real tokens'
    logits do not depend on what the padding holds."""
    ours = perturbed(AlbertForQuestionAnswering(make_config(embedding_size=16, hidden_size=48)))
    ids, token_types, mask = batch()
    other = ids.masked_fill(mask == 0, 7)
    with torch.no_grad():
        a, b = ours(ids, token_types, mask), ours(other, token_types, mask)
    assert torch.isfinite(a.start_logits).all() and torch.isfinite(a.end_logits).all()
    real = mask.bool()
    torch.testing.assert_close(a.start_logits[real], b.start_logits[real], atol=ATOL, rtol=0)
    assert not torch.allclose(a.start_logits[~real], b.start_logits[~real])


def test_export_loads_in_transformers_and_transformers_save_loads_in_ours(tmp_path):
    config = make_config(**CONFIGS["E<H"], num_labels=3)  # the QA head has 2 outputs whatever num_labels says
    torch.manual_seed(0)
    ours = perturbed(AlbertForQuestionAnswering(config))
    save_hf_pretrained(ours, tmp_path / "ours")
    hf_config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert hf_config["architectures"] == ["AlbertForQuestionAnswering"] and hf_config["num_labels"] == 2
    hf, info = transformers.AlbertForQuestionAnswering.from_pretrained(
        tmp_path / "ours", output_loading_info=True, attn_implementation="sdpa"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_qa_parity(ours, hf)
    auto = transformers.AutoModelForQuestionAnswering.from_pretrained(tmp_path / "ours")
    assert type(auto) is transformers.AlbertForQuestionAnswering

    theirs = hf_model(make_config(**CONFIGS["groups+inner"]), "AlbertForQuestionAnswering")
    theirs.save_pretrained(tmp_path / "theirs")
    loaded = load_hf_pretrained(tmp_path / "theirs")  # the architecture from config.json
    assert type(loaded) is AlbertForQuestionAnswering
    assert_qa_parity(loaded, theirs)
    assert_qa_parity(load_hf_pretrained(tmp_path / "theirs", AlbertForQuestionAnswering), theirs)


def test_pretrained_encoder_loads_under_a_fresh_qa_head(tmp_path):
    config = make_config(**CONFIGS["E<H"])
    pretrained = perturbed(AlbertForPreTraining(config))
    save_hf_pretrained(pretrained, tmp_path / "pre")
    hf_bare = hf_model(config, "AlbertModel")
    hf_bare.save_pretrained(tmp_path / "bare")

    for folder, encoder in ((tmp_path / "pre", pretrained.albert), (tmp_path / "bare", hf_bare)):
        torch.manual_seed(3)
        qa = AlbertForQuestionAnswering(config.replace(hidden_dropout_prob=0.1))  # fine-tuning's dropout may differ
        fresh_head = {k: v.clone() for k, v in qa.qa_outputs.state_dict().items()}
        apply_pretrained_encoder(qa, folder)
        theirs = encoder.state_dict()
        for name, value in qa.albert.state_dict().items():
            torch.testing.assert_close(value, theirs[name], atol=0, rtol=0)
        assert not any(name.startswith("pooler.") for name in qa.albert.state_dict())
        for name, value in qa.qa_outputs.state_dict().items():
            torch.testing.assert_close(value, fresh_head[name], atol=0, rtol=0)

    ids, token_types, mask = batch()
    with torch.no_grad():
        hidden = qa.eval().albert(ids, token_types, mask).last_hidden_state
        expected = hf_bare(input_ids=ids, token_type_ids=token_types, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(hidden, expected, atol=ATOL, rtol=0)

    deeper = AlbertForQuestionAnswering(config.replace(num_hidden_layers=4))  # same shapes, other depth
    with pytest.raises(ValueError, match="num_hidden_layers"):
        apply_pretrained_encoder(deeper, tmp_path / "pre")


def test_encoder_load_keeps_the_classifier_pooler_and_requires_it(tmp_path):
    """A head that reads the pooler gets it from the checkpoint; one that lacks it is named."""
    config = make_config(**CONFIGS["E<H"])
    pretrained = perturbed(AlbertModel(config))
    save_hf_pretrained(pretrained, tmp_path / "bare")
    classifier = AlbertForSequenceClassification(config)
    apply_pretrained_encoder(classifier, tmp_path / "bare")
    torch.testing.assert_close(classifier.albert.pooler.weight, pretrained.pooler.weight, atol=0, rtol=0)

    save_hf_pretrained(perturbed(AlbertForQuestionAnswering(config)), tmp_path / "qa")
    with pytest.raises(ValueError, match="missing.*pooler.weight"):
        apply_pretrained_encoder(AlbertForSequenceClassification(config), tmp_path / "qa")


def answer_with_transformers(folder: Path, question: str, context: str, max_answer_len: int = 15) -> dict:
    """transformers 4's question-answering pipeline, reduced to one window: transformers 5 removed
    that pipeline (`pipeline("question-answering")` raises KeyError), so its decoding is redone here
    on transformers' own Auto classes, which read the folder as any consumer would."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    enc = tokenizer(question, context, truncation="only_second", return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0]
    with torch.no_grad():
        out = model(**enc)
    in_context = torch.tensor([s == 1 for s in enc.sequence_ids(0)])
    start = out.start_logits[0].masked_fill(~in_context, -1e4).softmax(-1)
    end = out.end_logits[0].masked_fill(~in_context, -1e4).softmax(-1)
    scores = torch.outer(start, end).triu().tril(max_answer_len - 1)  # start <= end < start + max_answer_len
    s, e = divmod(int(scores.argmax()), scores.shape[1])
    char_start, char_end = int(offsets[s][0]), int(offsets[e][1])
    return {"answer": context[char_start:char_end], "start": char_start, "end": char_end, "score": float(scores[s, e])}


def test_exported_folder_answers_through_transformers_auto_classes(tiny_pretrained, tmp_path):
    spiece = Path(tiny_pretrained) / "spiece.model"
    vocab_size = AlbertConfig.from_hf_dict(json.loads((Path(tiny_pretrained) / "config.json").read_text())).vocab_size
    config = make_config(**CONFIGS["E<H"], vocab_size=vocab_size, max_position_embeddings=128)
    torch.manual_seed(0)
    folder = save_hf_pretrained(perturbed(AlbertForQuestionAnswering(config)), tmp_path / "qa", spiece_model=spiece)
    assert type(transformers.AutoTokenizer.from_pretrained(folder)) is transformers.AlbertTokenizer
    with pytest.raises(KeyError, match="question-answering has been removed"):
        transformers.pipeline("question-answering", model=str(folder), tokenizer=str(folder))

    context = "The company reported higher profits in the third quarter, helped by strong sales in Asia."
    answer = answer_with_transformers(folder, "What helped the profits?", context)
    assert 0 <= answer["start"] < answer["end"] <= len(context)
    assert answer["answer"] == context[answer["start"] : answer["end"]] and answer["answer"].strip()
    assert 0.0 < answer["score"] <= 1.0
