"""One fine-tuning step and its settings: the classifier's [CLS]-only last layer, finetune.precision
and finetune.compile, and the step train_epoch takes for every batch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from albert_model import AlbertConfig, AlbertForSequenceClassification
from pipelines.config import FinetuneSection, build_section
from pipelines.errors import ConfigError
from pipelines.finetuning import loop as loop_module
from pipelines.finetuning import trial as trial_module
from pipelines.finetuning.families.classification.training import CLASSIFICATION
from pipelines.finetuning.families.regression.training import REGRESSION
from pipelines.finetuning.family import EncodedTask
from pipelines.finetuning.loop import (
    GraphedModel,
    build_schedule,
    collate,
    epoch_batches,
    graph_widths,
    predict,
    resolve_precision,
    train_epoch,
)
from pipelines.finetuning.trial import TrialData, fit_trial
from pipelines.train.build import build_optimizer
from tests.albert_model.test_model import tiny as tiny_config


def tiny(**kw) -> AlbertConfig:
    return tiny_config(**{"num_labels": 3, **kw})


def toy_examples(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """[CLS] ids [SEP] of lengths 3..12: batches of several widths, most of them padded."""
    rng = np.random.default_rng(seed)
    encoded = []
    for _ in range(n):
        ids = [2, *rng.integers(5, 97, rng.integers(1, 11)).tolist(), 3]
        encoded.append((ids, [0] * len(ids)))
    return encoded


@pytest.mark.parametrize(
    "kw", [{}, dict(num_hidden_groups=2, inner_group_num=2), dict(sharing="none", num_hidden_layers=3)]
)
def test_classifier_logits_equal_the_full_computation(kw):
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny(**kw)).eval()
    ids = torch.randint(5, 97, (3, 9))
    types = torch.zeros_like(ids)
    types[:, 5:] = 1
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 3:] = 0
    last = model.albert.encoder.albert_layer_groups[-1].albert_layers[-1]
    widths = []
    last.register_forward_hook(lambda module, args, out: widths.append(out.shape[1]))
    with torch.no_grad():
        logits = model(ids, types, mask)
        widths_of_one_forward = list(widths)
        full = model.classifier(model.albert(ids, types, mask).pooler_output)  # every layer at every position
    torch.testing.assert_close(logits, full, atol=1e-5, rtol=0)
    assert logits.shape == (3, 3)
    assert widths_of_one_forward[-1] == 1  # the last layer ran at [CLS] only
    assert widths[-1] == 9


def test_precision_auto_is_bf16_on_cuda_and_fp32_elsewhere():
    assert resolve_precision("auto", torch.device("cuda")) == "bf16"
    assert resolve_precision("auto", torch.device("cpu")) == "fp32"
    assert resolve_precision("fp32", torch.device("cuda")) == "fp32"
    assert resolve_precision("bf16", torch.device("cpu")) == "bf16"


def test_precision_and_compile_are_checked_like_every_key():
    section = build_section(FinetuneSection, {"precision": "bf16", "compile": True})
    assert section.precision == "bf16" and section.compile is True
    assert FinetuneSection().precision == "auto" and FinetuneSection().compile is False
    with pytest.raises(ConfigError, match=r"finetune.precision='fp16': must be one of auto, bf16, fp32"):
        build_section(FinetuneSection, {"precision": "fp16"})
    with pytest.raises(ConfigError, match=r"finetune.compile='yes': must be bool"):
        build_section(FinetuneSection, {"compile": "yes"})


def test_collate_pads_and_selects_the_labels():
    encoded = [([2, 10, 3], [0, 0, 0]), ([2, 11, 12, 13, 3], [0, 0, 1, 1, 1]), ([2, 3], [0, 0])]
    batch = collate(encoded, np.array([2, 1]), 0, torch.tensor([7, 8, 9]))
    assert batch["input_ids"].tolist() == [[2, 3, 0, 0, 0], [2, 11, 12, 13, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 1, 1, 1]]
    assert batch["labels"].tolist() == [9, 8]
    assert set(collate(encoded, [0], 0)) == {"input_ids", "token_type_ids", "attention_mask"}


def test_graph_widths_are_few_rounded_and_end_at_the_longest_sequence():
    assert graph_widths(128) == (32, 64, 96, 128)
    assert graph_widths(512) == (128, 256, 384, 512)
    assert graph_widths(100) == (32, 56, 80, 100)  # multiples of 8, none beyond max_seq_length
    assert graph_widths(130) == (40, 72, 104, 130)
    assert graph_widths(6) == (6,)
    encoded = [([2, 10, 3], [0, 0, 0]), ([2, 11, 12, 13, 3], [0, 0, 1, 1, 1])]
    batch = collate(encoded, [0, 1], 0, widths=(4, 8, 12))
    assert batch["input_ids"].tolist() == [[2, 10, 3, 0, 0, 0, 0, 0], [2, 11, 12, 13, 3, 0, 0, 0]]
    assert batch["attention_mask"].sum(1).tolist() == [3, 5]
    assert collate(encoded, [0], 0, widths=(4, 8))["input_ids"].shape == (1, 4)
    assert collate(encoded, [1], 0, widths=(2, 4))["input_ids"].shape == (1, 5)  # no width holds it: its own


def test_an_epoch_padded_to_the_graph_widths_trains_as_an_unpadded_one():
    encoded, targets = toy_examples(40), torch.tensor([i % 3 for i in range(40)])
    results = []
    for widths in ((), graph_widths(12)):
        torch.manual_seed(0)
        model = AlbertForSequenceClassification(tiny(classifier_dropout_prob=0.0))
        optimizer = build_optimizer(model, "adamw", 1e-3, 0.01)
        schedule = build_schedule(optimizer, 10, 0.2)
        batches = epoch_batches(40, 8, 0, 0)
        loss = train_epoch(
            model, optimizer, schedule, encoded, targets, batches, 0, 1.0, CLASSIFICATION.loss_sum, widths=widths
        )
        results.append((loss, predict(model.eval(), encoded, 16, 0)))
    (loss, logits), (padded_loss, padded_logits) = results
    assert padded_loss == pytest.approx(loss, rel=1e-5)
    np.testing.assert_allclose(padded_logits, logits, atol=1e-5)


def test_graphed_model_sends_full_batches_to_the_graphs_and_others_to_the_eager_model(monkeypatch):
    """The routing alone (torch.compile recorded, not run): tests/pipelines/finetuning/test_gpu.py
    runs the real graphs against the eager model on a GPU."""
    compiled, calls = [], []

    def fake_compile(model, **options):
        compiled.append(options)
        return lambda *args, **kwargs: calls.append("graphs") or model(*args, **kwargs)

    monkeypatch.setattr(loop_module.torch, "compile", fake_compile)
    monkeypatch.setattr(loop_module.torch.compiler, "cudagraph_mark_step_begin", lambda: calls.append("mark"))
    torch.manual_seed(0)
    model = AlbertForSequenceClassification(tiny())
    graphed = GraphedModel(model, batch_size=4)
    assert compiled == [{"mode": "reduce-overhead", "dynamic": False}]
    assert {id(p) for p in graphed.parameters()} == {id(p) for p in model.parameters()}
    ids = torch.randint(5, 97, (4, 8))
    graphed(ids, token_type_ids=torch.zeros_like(ids), attention_mask=torch.ones_like(ids))
    assert calls == ["mark", "graphs"]
    graphed(ids[:3], token_type_ids=torch.zeros_like(ids[:3]), attention_mask=torch.ones_like(ids[:3]))
    assert calls == ["mark", "graphs"]  # the epoch's last, smaller batch ran eagerly


def reference_epoch(model, optimizer, schedule, encoded, targets, batches, regression: bool) -> float:
    """The plain loop: every batch's mean loss, backward, clip at 1.0, step; the mean of the losses."""
    total = 0.0
    for batch in batches:
        inputs = collate(encoded, batch, 0)
        logits = model.classifier(model.dropout(model.albert(**inputs).pooler_output))  # the full computation
        y = torch.tensor([targets[i] for i in batch])
        loss = F.mse_loss(logits[:, 0], y.float()) if regression else F.cross_entropy(logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        total += loss.item() * len(batch)
    return total / sum(len(b) for b in batches)


@pytest.mark.parametrize("regression", [False, True])
def test_an_epoch_trains_as_the_plain_loop_does(regression):
    encoded = toy_examples(40)
    targets = [float(i % 3) if regression else i % 3 for i in range(40)]
    results = []
    for epoch_fn in (train_epoch, None):
        torch.manual_seed(0)
        model = AlbertForSequenceClassification(tiny(num_labels=1 if regression else 3, classifier_dropout_prob=0.0))
        optimizer = build_optimizer(model, "adamw", 1e-3, 0.01)
        schedule = build_schedule(optimizer, 10, 0.2)
        batches = epoch_batches(40, 8, 0, 0)
        if epoch_fn is None:
            loss = reference_epoch(model, optimizer, schedule, encoded, targets, batches, regression)
        else:
            family = REGRESSION if regression else CLASSIFICATION
            y = torch.tensor(targets, dtype=family.target_dtype)
            loss = epoch_fn(model, optimizer, schedule, encoded, y, batches, 0, 1.0, family.loss_sum)
        results.append((loss, predict(model.eval(), encoded, 16, 0)))
    (loss, logits), (reference_loss, reference_logits) = results
    assert loss == pytest.approx(reference_loss, rel=1e-5)
    np.testing.assert_allclose(logits, reference_logits, atol=1e-5)


def test_bf16_on_the_cpu_stays_close_to_fp32_and_is_not_fp32():
    encoded, targets = toy_examples(32), torch.tensor([i % 3 for i in range(32)])
    losses, logits = {}, {}
    for precision in ("fp32", "bf16"):
        torch.manual_seed(0)
        model = AlbertForSequenceClassification(tiny(classifier_dropout_prob=0.0))
        optimizer = build_optimizer(model, "adamw", 1e-3, 0.0)
        schedule = build_schedule(optimizer, 4, 0.0)
        batches = epoch_batches(32, 8, 0, 0)
        losses[precision] = train_epoch(
            model, optimizer, schedule, encoded, targets, batches, 0, 1.0, CLASSIFICATION.loss_sum, precision=precision
        )
        logits[precision] = predict(model, encoded, 16, 0, precision=precision)
        assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.02)
    assert losses["bf16"] != losses["fp32"]
    np.testing.assert_allclose(logits["bf16"], logits["fp32"], atol=0.05)


def toy_trial_data() -> TrialData:
    encoded = [([2, 10 + (i % 2), 3], [0, 0, 0]) for i in range(16)]
    labels = np.asarray([i % 2 for i in range(16)])
    task = EncodedTask(encoded, labels, encoded[:8], labels[:8], label_names=["a", "b"], num_labels=2)
    return TrialData("classification", task, 0, {})


@pytest.mark.parametrize("precision, expected", [("auto", "fp32"), ("bf16", "bf16")])
def test_a_trial_trains_at_its_precision_with_its_layer_groups_compiled(
    tiny_pretrained, tmp_path, monkeypatch, precision, expected
):
    compiled, precisions, reports = [], [], []
    from pipelines.train import parallel  # the trial imports it where it compiles

    monkeypatch.setattr(parallel, "apply_compile", compiled.append)
    real_train_epoch = trial_module.train_epoch

    def spy(*args, **kwargs):
        precisions.append(args[-1])
        return real_train_epoch(*args, **kwargs)

    monkeypatch.setattr(trial_module, "train_epoch", spy)
    cfg = FinetuneSection(epochs=2, batch_size=8, precision=precision, compile=True)
    fit_trial(cfg, toy_trial_data(), tiny_pretrained, str(tmp_path), lambda m, c: reports.append((m, c)))
    assert len(compiled) == 1 and isinstance(compiled[0], AlbertForSequenceClassification)
    assert precisions == [expected, expected]
    assert [m["epoch"] for m, _ in reports] == [1, 2]
    assert all(np.isfinite(m["train_loss"]) and 0 <= m["accuracy"] <= 1 for m, _ in reports)
    assert (tmp_path / "epoch_2" / "model.safetensors").exists()


def test_gradient_accumulation_trains_as_the_whole_batch():
    """finetune.grad_accum_steps: a batch of 8 as 2 or 3 micro-batches gives the same losses and
    weights as one (no dropout: the same computation, summed in another order)."""
    encoded, targets = toy_examples(40), torch.tensor([i % 3 for i in range(40)])
    results = []
    for accumulation in (1, 2, 3):
        torch.manual_seed(0)
        model = AlbertForSequenceClassification(tiny(classifier_dropout_prob=0.0))
        optimizer = build_optimizer(model, "adamw", 1e-3, 0.01)
        schedule = build_schedule(optimizer, 10, 0.2)
        loss = train_epoch(
            model,
            optimizer,
            schedule,
            encoded,
            targets,
            epoch_batches(40, 8, 0, 0),
            0,
            1.0,
            CLASSIFICATION.loss_sum,
            accumulation=accumulation,
        )
        results.append((loss, predict(model.eval(), encoded, 16, 0)))
    for loss, logits in results[1:]:
        assert loss == pytest.approx(results[0][0], rel=1e-6)
        np.testing.assert_allclose(logits, results[0][1], atol=1e-5)


def test_grad_accum_steps_is_checked_and_the_seed_is_searchable():
    from pipelines.config import load_config

    with pytest.raises(ValueError, match="grad_accum_steps=2: must be 1 with finetune.cuda_graphs"):
        FinetuneSection(grad_accum_steps=2, cuda_graphs=True)
    with pytest.raises(ValueError, match="grad_accum_steps=0: must be >= 1"):
        FinetuneSection(grad_accum_steps=0)
    config = load_config(overrides=["tune.space={finetune.seed: [1, 2], finetune.lr: 0.001}"])
    assert config.tune.space["finetune.seed"] == [1, 2]
