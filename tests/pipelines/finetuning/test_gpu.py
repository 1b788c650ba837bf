"""The GPU path of fine-tuning (CUDA only: skipped without it, and a skip is never a pass), for
each task family's model (a sequence classifier; question answering's start and end positions): an
epoch never waits for the device between steps, bf16 stays within its tolerance of fp32, fp32 on
the GPU equals the CPU, and compiled layer groups and the CUDA graphs of finetune.cuda_graphs equal
eager ones over batches of several widths.
`python bench/gpu_suite.py` runs these with the GPU benchmarks."""

import numpy as np
import pytest
import torch

from pipelines.finetuning.families import task_family
from pipelines.finetuning.loop import (
    GraphedModel,
    build_schedule,
    collate,
    epoch_batches,
    finetune_step,
    graph_widths,
    predict,
    train_epoch,
)
from pipelines.train.build import build_optimizer
from pipelines.train.parallel import apply_compile
from tests.pipelines.train.test_gpu import CONFIG as PRETRAINING_CONFIG

pytestmark = pytest.mark.gpu

CONFIG = PRETRAINING_CONFIG.replace(num_labels=3, classifier_dropout_prob=0.0)  # the pretraining GPU tests' sizes
N = 96
CUDA = torch.device("cuda", 0)


TASK_NAMES = ("classification", "question_answering")  # a model per family: the pooled [CLS] one, the per-position one


def examples(seed: int = 0, task: str = "classification") -> tuple[list[tuple[list[int], list[int]]], torch.Tensor]:
    """Lengths 40..128 (batches of several widths, most padded) and targets a toy rule can learn: a
    label, or a (start, end) span inside the sequence."""
    rng = np.random.default_rng(seed)
    encoded, targets = [], []
    for _ in range(N):
        ids = [2, *rng.integers(5, 1000, rng.integers(38, 127)).tolist(), 3]
        encoded.append((ids, [0] * len(ids)))
        start = 1 + ids[1] % 30
        targets.append((start, start + ids[2] % 5) if task == "question_answering" else ids[1] % 3)
    return encoded, torch.tensor(targets)


def epoch(
    device: torch.device,
    precision: str,
    compile_: bool = False,
    epochs: int = 2,
    graphs: bool = False,
    widths: tuple[int, ...] = (),
    batch_size: int = 16,
    task: str = "classification",
):
    """Train losses of `epochs` epochs from the same start, and the scores after them (logits, or
    start and end logits)."""
    encoded, targets = examples(task=task)
    family = task_family(task)
    torch.manual_seed(0)
    model = family.model_class(CONFIG).to(device)
    if compile_:
        apply_compile(model)
    trained = GraphedModel(model, batch_size) if graphs else model
    optimizer = build_optimizer(trained, "adamw", 1e-4, 0.01)
    schedule = build_schedule(optimizer, epochs * 6, 0.1)
    losses = [
        train_epoch(
            trained,
            optimizer,
            schedule,
            encoded,
            targets,
            epoch_batches(N, batch_size, 0, e),
            0,
            1.0,
            family.loss_sum,
            device=device,
            precision=precision,
            widths=widths,
        )
        for e in range(epochs)
    ]
    return losses, predict(model, encoded, 32, 0, device=device, precision=precision, scores_of=family.scores)


TASKS = pytest.mark.parametrize("task", TASK_NAMES)


@TASKS
def test_steps_never_wait_for_the_device(task):
    encoded, targets = examples(task=task)
    family = task_family(task)
    loss_of = family.loss_sum
    torch.manual_seed(0)
    model = family.model_class(CONFIG).to(CUDA).train()
    optimizer = build_optimizer(model, "adamw", 1e-4, 0.01)
    assert optimizer.defaults["fused"]  # torch's fused AdamW on the GPU
    schedule = build_schedule(optimizer, 10, 0.1)
    full = [i for i, (ids, _) in enumerate(encoded) if len(ids) == max(len(x) for x, _ in encoded)][:1]
    batches = [collate(encoded, b, 0, targets, pin=True) for b in ([0, 1, 2, 3], full, [4, 5, 6, 7, 8])]
    finetune_step(model, optimizer, schedule, batches[0], 4, 1.0, loss_of, CUDA, "bf16")  # allocations, lazy init
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        losses = [
            finetune_step(model, optimizer, schedule, b, len(b["labels"]), 1.0, loss_of, CUDA, "bf16") for b in batches
        ]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert all(loss.is_cuda and torch.isfinite(loss) for loss in losses)


@TASKS
def test_bf16_stays_within_its_tolerance_of_fp32(task):
    fp32_losses, fp32_logits = epoch(CUDA, "fp32", task=task)
    bf16_losses, bf16_logits = epoch(CUDA, "bf16", task=task)
    assert bf16_losses == pytest.approx(fp32_losses, rel=0.02)
    assert np.abs(bf16_logits - fp32_logits).max() < 0.05 * np.abs(fp32_logits).max() + 0.05


@TASKS
def test_fp32_on_the_gpu_equals_the_cpu(task):
    cpu_losses, cpu_logits = epoch(torch.device("cpu"), "fp32", task=task)
    gpu_losses, gpu_logits = epoch(CUDA, "fp32", task=task)
    assert gpu_losses == pytest.approx(cpu_losses, rel=1e-4)
    np.testing.assert_allclose(gpu_logits, cpu_logits, atol=1e-3)


@TASKS
def test_compile_equals_eager(task):
    eager_losses, eager_logits = epoch(CUDA, "fp32", task=task)
    compiled_losses, compiled_logits = epoch(CUDA, "fp32", compile_=True, task=task)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-4)
    np.testing.assert_allclose(compiled_logits, eager_logits, atol=1e-3)


@TASKS
def test_cuda_graphs_equal_eager(task):
    """finetune.cuda_graphs: the whole model compiled and replayed as CUDA graphs (batches of 20
    padded to 4 widths, the last batch of 16 eager) trains as the eager model on the same batches,
    and no graph was skipped (a skip would leave the speed path silently eager)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    widths = graph_widths(128)
    eager_losses, eager_logits = epoch(CUDA, "fp32", widths=widths, batch_size=20, task=task)
    graphed_losses, graphed_logits = epoch(CUDA, "fp32", graphs=True, widths=widths, batch_size=20, task=task)
    assert counters["stats"]["unique_graphs"] >= 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert graphed_losses == pytest.approx(eager_losses, rel=1e-3)
    np.testing.assert_allclose(graphed_logits, eager_logits, atol=1e-3)
