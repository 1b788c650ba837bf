"""The model, optimizer, schedule and trial settings of fine-tuning."""

import numpy as np
import pytest
import torch

from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertForQuestionAnswering, AlbertForSequenceClassification, AlbertModel
from pipelines.config import FinetuneSection
from pipelines.finetuning.families.classification.training import CLASSIFICATION
from pipelines.finetuning.loop import build_model, build_schedule, epoch_batches, predict, train_epoch
from pipelines.finetuning.trial import trial_finetune
from pipelines.train.build import build_optimizer


def build_classifier(directory, num_labels, dropout, init, seed):
    return build_model(directory, AlbertForSequenceClassification, num_labels, dropout, init, seed)


def test_pretrained_init_loads_the_encoder_and_random_init_does_not(tiny_pretrained):
    reference = load_hf_pretrained(tiny_pretrained, AlbertModel).state_dict()
    pretrained = build_classifier(tiny_pretrained, 5, 0.2, "pretrained", seed=0)
    random = build_classifier(tiny_pretrained, 5, 0.2, "random", seed=0)
    for name, value in reference.items():
        assert torch.equal(pretrained.albert.state_dict()[name], value), name
    assert not torch.equal(
        random.albert.embeddings.word_embeddings.weight, reference["embeddings.word_embeddings.weight"]
    )
    assert random.config.hidden_size == pretrained.config.hidden_size  # same architecture
    assert pretrained.classifier.out_features == 5 and pretrained.dropout.p == 0.2
    assert torch.equal(pretrained.classifier.weight, random.classifier.weight)  # the seed decides the head


def test_a_question_answering_head_takes_the_encoder_without_its_pooler(tiny_pretrained):
    reference = load_hf_pretrained(tiny_pretrained, AlbertModel).state_dict()
    model = build_model(tiny_pretrained, AlbertForQuestionAnswering, 1, 0.1, "pretrained", seed=0)
    assert model.albert.pooler is None and any(k.startswith("pooler.") for k in reference)
    for name, value in model.albert.state_dict().items():
        assert torch.equal(value, reference[name]), name


def test_no_weight_decay_on_biases_and_layernorm(tiny_pretrained):
    model = build_classifier(tiny_pretrained, 2, 0.1, "pretrained", seed=0)
    decay, no_decay = build_optimizer(model, "adamw", 1e-3, 0.01).param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0
    assert all(
        "layernorm" in names[id(p)].lower().replace("_", "") or names[id(p)].endswith("bias")
        for p in no_decay["params"]
    )
    assert any(names[id(p)].endswith("full_layer_layer_norm.weight") for p in no_decay["params"])
    assert any(names[id(p)] == "classifier.weight" for p in decay["params"])


def test_schedule_warms_up_then_decays_linearly_to_zero():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    schedule = build_schedule(optimizer, total_steps=10, warmup_ratio=0.2)
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert lrs == pytest.approx([0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125])
    assert optimizer.param_groups[0]["lr"] == 0.0


def test_epoch_batches_are_seeded_per_epoch_and_cover_every_example():
    a = epoch_batches(10, 4, seed=1, epoch=0)
    assert sorted(np.concatenate(a).tolist()) == list(range(10)) and [len(b) for b in a] == [4, 4, 2]
    assert [b.tolist() for b in a] == [b.tolist() for b in epoch_batches(10, 4, seed=1, epoch=0)]
    assert [b.tolist() for b in a] != [b.tolist() for b in epoch_batches(10, 4, seed=1, epoch=1)]
    assert [len(b) for b in epoch_batches(9, 4, seed=1, epoch=0, world=2)] == [4, 4]  # 1 < 2 workers: dropped


def test_training_lowers_the_loss_on_a_learnable_toy_task(tiny_pretrained):
    torch.manual_seed(0)
    encoded = [([2, 10 + (i % 2), 3], [0, 0, 0]) for i in range(32)]
    targets = torch.tensor([i % 2 for i in range(32)])
    model = build_classifier(tiny_pretrained, 2, 0.0, "pretrained", seed=0)
    optimizer = build_optimizer(model, "adamw", 1e-3, 0.0)
    schedule = build_schedule(optimizer, 40, 0.1)
    losses = [
        train_epoch(
            model, optimizer, schedule, encoded, targets, epoch_batches(32, 8, 0, e), 0, 1.0, CLASSIFICATION.loss_sum
        )
        for e in range(10)
    ]
    assert losses[-1] < 0.5 * losses[0]
    logits = predict(model, encoded, batch_size=5, pad_id=0)
    assert logits.shape == (32, 2) and (logits.argmax(1) == targets.numpy()).mean() == 1.0


def test_trial_overrides_are_validated_like_the_command_line():
    base = FinetuneSection(lr=1e-5)
    cfg = trial_finetune(base, {"finetune.lr": np.float64(3e-5), "finetune.batch_size": 16})
    assert cfg.lr == 3e-5 and type(cfg.lr) is float and cfg.batch_size == 16 and base.lr == 1e-5
    with pytest.raises(ValueError, match=r"finetune.warmup_ratio=1.5: must be in \[0, 1\)"):
        trial_finetune(base, {"finetune.warmup_ratio": 1.5})
