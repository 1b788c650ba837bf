"""The task families: the registry's six, each a folder of its own name declaring its metrics, its
keys and its head (exported as the transformers class of that name); and the contract the trial
loop relies on, family by family."""

from pathlib import Path

import pytest
import transformers

import pipelines.finetuning.families as registry
from pipelines.config import FinetuneSection
from pipelines.finetuning.families import FAMILIES, task_family, unread_keys
from pipelines.finetuning.results import SUMMARY_METRICS

FOLDER = Path(registry.__file__).parent


def test_each_family_is_the_folder_of_its_name_and_each_folder_a_family():
    folders = {p.name for p in FOLDER.iterdir() if (p / "__init__.py").exists() and not p.name.startswith("_")}
    assert (
        folders
        == set(FAMILIES)
        == {
            "classification",
            "regression",
            "multi_label",
            "token_classification",
            "multiple_choice",
            "question_answering",
        }
    )
    for name, family in FAMILIES.items():
        assert family.name == name and family.training.startswith(f"{registry.__name__}.{name}.")


def test_every_family_has_its_metrics_keys_and_a_transformers_class():
    for name, family in FAMILIES.items():
        assert family.metrics and len(set(family.metrics)) == len(family.metrics), name
        assert hasattr(transformers, family.architecture) and family.model_class.__name__ == family.architecture
        assert task_family(name).model_class is family.model_class
        assert set(family.keys) <= set(FinetuneSection.__dataclass_fields__), name
        # the trials' table keeps every metric a search may rank by (a missing one: no trial "reported" it)
        assert set(family.metrics) <= set(SUMMARY_METRICS), name


def test_the_keys_a_family_does_not_read_are_the_other_families_own():
    assert unread_keys("question_answering") >= {"finetune.label_column", "finetune.classifier_dropout"}
    assert "finetune.doc_stride" not in unread_keys("question_answering")
    assert unread_keys("classification") >= {"finetune.doc_stride", "finetune.tags_column", "finetune.label_delimiter"}
    assert "finetune.label_column" not in unread_keys("multiple_choice") | unread_keys("regression")
    assert "finetune.label_delimiter" not in unread_keys("multi_label")
    assert not any(key.startswith(("finetune.lr", "finetune.max_seq_length")) for key in unread_keys("regression"))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_batch_goes_through_its_model_loss_and_scores(name):
    """The contract the trial loop relies on, family by family: collate -> the head's forward ->
    a finite summed loss with gradients, and scores with a row per feature."""
    import torch

    from tests.albert_model.test_model import tiny

    family = task_family(name)
    torch.manual_seed(0)
    model = family.model_class(
        tiny(num_labels=3 if name in ("classification", "multi_label", "token_classification") else 1)
    )
    encoded = [([2, 10, 11, 3, 12, 3], [0, 0, 0, 0, 1, 1]), ([2, 13, 3, 14, 15, 16, 3], [0, 0, 0, 1, 1, 1, 1])]
    if name == "multiple_choice":  # a feature per question: a sequence per choice
        encoded = [[encoded[0], encoded[1]], [encoded[1], encoded[0]]]
    targets = {
        "multiple_choice": [1, 0],
        "classification": [2, 0],
        "regression": [0.5, -1.0],
        "multi_label": [[1, 0, 1], [0, 0, 0]],
        "token_classification": [[-100, 2, 0, -100, 1, -100, -100], [-100, 0, -100, 1, 1, 2, -100]],
        "question_answering": [(4, 4), (0, 0)],
    }[name]
    batch = family.collate(encoded, [0, 1], 0, torch.tensor(targets, dtype=family.target_dtype))
    labels = batch.pop("labels")
    outputs = model(**batch)
    loss = family.loss_sum(outputs, labels)
    loss.backward()
    assert loss.ndim == 0 and torch.isfinite(loss) and model.albert.embeddings.word_embeddings.weight.grad is not None
    assert family.scores(outputs).shape[0] == 2


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_loss_is_fp32_for_bf16_outputs(name):
    import torch

    family = task_family(name)
    logits = torch.randn(2, 5, dtype=torch.bfloat16)
    if name == "question_answering":
        from albert_model.model import AlbertQuestionAnsweringOutput

        outputs, targets = AlbertQuestionAnsweringOutput(logits, logits.flip(1)), torch.tensor([[1, 2], [0, 0]])
    elif name == "token_classification":
        outputs = torch.randn(2, 3, 4, dtype=torch.bfloat16)
        targets = torch.tensor([[0, -100, 3], [1, 2, -100]])
    elif name == "multi_label":
        outputs, targets = logits, torch.tensor([[1, 0, 0, 1, 0], [0, 0, 0, 0, 0]], dtype=family.target_dtype)
    else:
        outputs, targets = logits, torch.tensor([1, 3], dtype=family.target_dtype)
    assert family.loss_sum(outputs, targets).dtype == torch.float32
