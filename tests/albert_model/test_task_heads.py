"""The multiple-choice and token-classification heads against transformers' AlbertForMultipleChoice
and AlbertForTokenClassification: equal logits for the same weights (padded rows, several sharing
layouts), export and import both ways (the architecture read from config.json, labels kept), a
pretrained encoder under each fresh head, and the trainable dropout where transformers has it."""

import json

import pytest
import torch
import transformers

from albert_model import (
    AlbertForMultipleChoice,
    AlbertForPreTraining,
    AlbertForTokenClassification,
)
from albert_model.hf import apply_pretrained_encoder, load_hf_pretrained, save_hf_pretrained, to_hf_state_dict

from .test_hf import ATOL, make_config
from .test_qa_head import CONFIGS, perturbed

HEADS = {
    "AlbertForMultipleChoice": AlbertForMultipleChoice,
    "AlbertForTokenClassification": AlbertForTokenClassification,
}
CHOICES, LABELS = 4, 5


def inputs(name: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Segments A and B, rows of different lengths, padding filled with the pad id: (B, S) for
    token classification, (B, choices, S) for multiple choice."""
    g = torch.Generator().manual_seed(seed)
    rows = 2 * CHOICES if name == "AlbertForMultipleChoice" else 3
    ids = torch.randint(5, 113, (rows, 12), generator=g)
    token_types = torch.zeros_like(ids)
    token_types[:, 6:] = 1
    lengths = torch.randint(5, 13, (rows,), generator=g)
    mask = (torch.arange(12)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, 0)
    batch = {"input_ids": ids, "token_type_ids": token_types, "attention_mask": mask}
    if name == "AlbertForMultipleChoice":
        batch = {k: v.view(2, CHOICES, 12) for k, v in batch.items()}
    return batch


def logits_of(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with torch.no_grad():
        out = model.eval()(**batch)
    return out if isinstance(out, torch.Tensor) else out.logits


def assert_parity(ours: torch.nn.Module, theirs: torch.nn.Module, name: str) -> None:
    batch = inputs(name)
    mine, hf = logits_of(ours, batch), logits_of(theirs, batch)
    expected = (2, CHOICES) if name == "AlbertForMultipleChoice" else (3, 12, LABELS)
    assert mine.shape == hf.shape == expected
    torch.testing.assert_close(mine, hf, atol=ATOL, rtol=0)


def hf_of(ours: torch.nn.Module, name: str) -> torch.nn.Module:
    config = transformers.AlbertConfig(**ours.config.to_hf_dict(), attn_implementation="sdpa")
    hf = getattr(transformers, name)(config)
    hf.load_state_dict(to_hf_state_dict(ours), strict=True)  # same names, nothing extra or missing
    return hf


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(HEADS))
def test_same_weights_give_transformers_logits(name, config_name):
    torch.manual_seed(0)
    ours = perturbed(HEADS[name](make_config(**CONFIGS[config_name], num_labels=LABELS)))
    assert (ours.albert.pooler is None) == (name == "AlbertForTokenClassification")  # as transformers' layout
    assert_parity(ours, hf_of(ours, name), name)


def test_a_choice_score_depends_on_its_own_sequence_only():
    """Choices are scored apart (the softmax over them is the loss's): changing one choice's
    tokens moves its logit and leaves the others'."""
    ours = perturbed(AlbertForMultipleChoice(make_config(**CONFIGS["E<H"])))
    batch = inputs("AlbertForMultipleChoice")
    other = {k: v.clone() for k, v in batch.items()}
    other["input_ids"][0, 2, 1:4] = torch.tensor([7, 8, 9])
    a, b = logits_of(ours, batch), logits_of(ours, other)
    assert not torch.allclose(a[0, 2], b[0, 2])
    keep = torch.ones_like(a, dtype=torch.bool)
    keep[0, 2] = False
    torch.testing.assert_close(a[keep], b[keep], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_dropout_is_the_classifiers_and_off_in_eval(name):
    config = make_config(**CONFIGS["E<H"], num_labels=LABELS, classifier_dropout_prob=0.5)
    ours = perturbed(HEADS[name](config))
    assert ours.dropout.p == 0.5 == hf_of(ours, name).dropout.p
    batch = inputs(name)
    torch.manual_seed(0)
    with torch.no_grad():
        trained = ours.train()(**batch)
    assert not torch.allclose(trained, logits_of(ours, batch))  # train mode drops, eval does not


@pytest.mark.parametrize("name", sorted(HEADS))
def test_export_loads_in_transformers_and_transformers_save_loads_in_ours(name, tmp_path):
    config = make_config(**CONFIGS["groups+inner"], num_labels=LABELS)
    torch.manual_seed(0)
    ours = perturbed(HEADS[name](config))
    id2label = {i: f"L{i}" for i in range(LABELS)} if name == "AlbertForTokenClassification" else None
    save_hf_pretrained(ours, tmp_path / "ours", id2label=id2label)
    exported = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert exported["architectures"] == [name]
    hf, info = getattr(transformers, name).from_pretrained(
        tmp_path / "ours", output_loading_info=True, attn_implementation="sdpa"
    )
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert_parity(ours, hf, name)
    auto = {
        "AlbertForMultipleChoice": transformers.AutoModelForMultipleChoice,
        "AlbertForTokenClassification": transformers.AutoModelForTokenClassification,
    }[name].from_pretrained(tmp_path / "ours")
    assert type(auto) is getattr(transformers, name)
    if id2label:
        assert auto.config.id2label == id2label

    hf.save_pretrained(tmp_path / "theirs")
    loaded = load_hf_pretrained(tmp_path / "theirs")  # the architecture from config.json
    assert type(loaded) is HEADS[name] and loaded.config.num_labels == LABELS
    assert_parity(loaded, hf, name)


@pytest.mark.parametrize("name", sorted(HEADS))
def test_a_pretrained_encoder_loads_under_a_fresh_head(name, tmp_path):
    config = make_config(**CONFIGS["E<H"])
    pretrained = perturbed(AlbertForPreTraining(config))
    save_hf_pretrained(pretrained, tmp_path / "pre")
    torch.manual_seed(3)
    model = HEADS[name](config.replace(num_labels=LABELS, hidden_dropout_prob=0.1))
    fresh_head = {k: v.clone() for k, v in model.classifier.state_dict().items()}
    apply_pretrained_encoder(model, tmp_path / "pre")
    theirs = pretrained.albert.state_dict()
    for key, value in model.albert.state_dict().items():
        torch.testing.assert_close(value, theirs[key], atol=0, rtol=0)
    for key, value in model.classifier.state_dict().items():
        torch.testing.assert_close(value, fresh_head[key], atol=0, rtol=0)


def test_a_multi_label_classifier_exports_its_problem_type_and_transformers_loss_matches(tmp_path):
    """Multi-label classification is the sequence classifier with a sigmoid per label: the export
    says so (problem_type), and transformers' loss on the export equals binary cross-entropy on our
    logits (the loss the metrics report as eval_loss)."""
    import numpy as np

    from albert_model import AlbertForSequenceClassification
    from pipelines.finetuning.families.multi_label.metrics import multi_label_metrics

    config = make_config(**CONFIGS["E<H"], num_labels=LABELS)
    torch.manual_seed(0)
    ours = perturbed(AlbertForSequenceClassification(config))
    save_hf_pretrained(ours, tmp_path / "ml", problem_type="multi_label_classification")
    assert json.loads((tmp_path / "ml" / "config.json").read_text())["problem_type"] == "multi_label_classification"
    hf = transformers.AlbertForSequenceClassification.from_pretrained(tmp_path / "ml", attn_implementation="sdpa")
    assert hf.config.problem_type == "multi_label_classification"
    batch = inputs("AlbertForTokenClassification")
    targets = (torch.rand(3, LABELS, generator=torch.Generator().manual_seed(2)) > 0.5).float()
    with torch.no_grad():
        logits = ours.eval()(**batch)
        theirs = hf.eval()(**batch, labels=targets)
    torch.testing.assert_close(logits, theirs.logits, atol=ATOL, rtol=0)
    ours_loss = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets)
    torch.testing.assert_close(ours_loss, theirs.loss, atol=ATOL, rtol=0)
    reported = multi_label_metrics(logits.numpy(), targets.numpy())["eval_loss"]
    assert reported == pytest.approx(float(theirs.loss), abs=1e-5)
    assert np.isfinite(reported)
