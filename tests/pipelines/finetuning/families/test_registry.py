"""The task families: one per finetune.task, each exporting to a transformers class, and the
contract the trial loop relies on, family by family."""

import pytest
import transformers

from pipelines.config import TUNE_METRICS
from pipelines.config.tuning import FINETUNE_TASKS
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.results import SUMMARY_METRICS


def test_every_task_is_a_family_with_its_metrics_and_a_transformers_class():
    assert sorted(FAMILIES) == sorted(FINETUNE_TASKS)
    for name, family in FAMILIES.items():
        assert family.name == name and family.metrics == TUNE_METRICS[name]
        assert hasattr(transformers, family.model_class.__name__)
        # the trials' table keeps every metric a search may rank by (a missing one: no trial "reported" it)
        assert set(family.metrics) <= set(SUMMARY_METRICS), name


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_batch_goes_through_its_model_loss_and_scores(name):
    """The contract the trial loop relies on, family by family: collate -> the head's forward ->
    a finite summed loss with gradients, and scores with a row per feature."""
    import torch

    from tests.albert_model.test_model import tiny

    family = FAMILIES[name]
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

    family = FAMILIES[name]
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
