"""The GPU path of fine-tuning (CUDA only: skipped without it, and a skip is never a pass), for
every task family's model and batches (FAMILIES: classification, regression and multi-label
classification from the pooled [CLS]; token classification's logits per position, its untagged
positions ignored; multiple choice's [batch, choices, seq] inputs and a score per choice; question
answering's start and end positions): an epoch never waits for the device between steps, bf16
stays within its tolerance of fp32, fp32 on the GPU equals the CPU, and compiled layer groups and
the CUDA graphs of finetune.cuda_graphs equal eager ones over batches of several widths.
`python bench/gpu_suite.py` runs these with the GPU benchmarks."""

import numpy as np
import pytest
import torch

from pipelines.finetuning.families import FAMILIES, task_family
from pipelines.finetuning.families.token_classification.training import IGNORED
from pipelines.finetuning.loop import (
    GraphedModel,
    build_schedule,
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

CONFIG = PRETRAINING_CONFIG.replace(classifier_dropout_prob=0.0)  # the pretraining GPU tests' sizes
N = 96
CUDA = torch.device("cuda", 0)

TASK_NAMES = tuple(FAMILIES)  # every finetune.task: on a GPU a new family fails in examples() until it has a format
NUM_LABELS = {"regression": 1, "multi_label": 4, "token_classification": 5, "multiple_choice": 1}
"""The heads' widths as each family's encode sets num_labels (3 classes where the family has classes)."""
CHOICES = 4


def config(task: str):
    return CONFIG.replace(num_labels=NUM_LABELS.get(task, 3))


def lengths(rng: np.random.Generator) -> np.ndarray:
    """Lengths 40..128, most short and a few long: random batches of 20 then hold no long example,
    one up to 96 or one above it, so finetune.cuda_graphs pads them to several of graph_widths(128)
    (uniform lengths would put a long one in nearly every batch: all padded to 128). One is 128."""
    sizes = rng.integers(40, 65, N)
    long = rng.choice(N, 6, replace=False)
    sizes[long[:3]] = rng.integers(65, 97, 3)
    sizes[long[3:]] = [*rng.integers(97, 128, 2), 128]
    return sizes


def examples(seed: int = 0, task: str = "classification") -> tuple[list, torch.Tensor]:
    """N examples in the family's format, with targets (the family's dtype) a toy rule can learn:
    for the sequence families a label, a number or a set of labels from the first token; token
    classification a tag on each word's first piece (a piece divisible by 4 continues a word and is
    ignored); multiple choice the choice whose second segment starts with the context's first
    token; question answering a (start, end) span inside the sequence."""
    rng = np.random.default_rng(seed)
    encoded, targets = [], []
    for length in lengths(rng):
        if task == "multiple_choice":
            context = rng.integers(5, 1000, length - 11).tolist()
            label = int(rng.integers(CHOICES))
            cut = rng.integers(0, 5, CHOICES).clip(max=length - 40)
            cut[rng.integers(CHOICES)] = 0  # the widest choice is `length` long
            question = []
            for j in range(CHOICES):
                answer = rng.integers(5, 1000, 8 - cut[j]).tolist()
                if j == label:
                    answer[0] = context[0]
                elif answer[0] == context[0]:
                    answer[0] = 5 + (answer[0] - 4) % 995  # another token
                ids = [2, *context, 3, *answer, 3]
                question.append((ids, [0] * (len(context) + 2) + [1] * (len(answer) + 1)))
            encoded.append(question)
            targets.append(label)
            continue
        ids = [2, *rng.integers(5, 1000, length - 2).tolist(), 3]
        encoded.append((ids, [0] * len(ids)))
        if task == "classification":
            targets.append(ids[1] % 3)
        elif task == "regression":
            targets.append((ids[1] % 5) / 4)
        elif task == "multi_label":
            targets.append([(ids[1] >> k) & 1 for k in range(NUM_LABELS[task])])
        elif task == "token_classification":
            row = np.full(CONFIG.max_position_embeddings, IGNORED)  # [N, max_seq_length] as the family's encode
            first = [p for p in range(1, len(ids) - 1) if ids[p] % 4]
            row[first] = [ids[p] % NUM_LABELS[task] for p in first]
            targets.append(row)
        elif task == "question_answering":
            start = 1 + ids[1] % 30
            targets.append((start, start + ids[2] % 5))
        else:
            raise KeyError(f"no GPU-test examples for task {task!r}: add its format to examples()")
    return encoded, torch.tensor(np.asarray(targets), dtype=task_family(task).target_dtype)


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
    """Train losses of `epochs` epochs from the same start, and the family's scores after them
    (logits: per example, per position or per choice; or start and end logits), batched by the
    family's collate as a trial batches them."""
    encoded, targets = examples(task=task)
    family = task_family(task)
    torch.manual_seed(0)
    model = family.model_class(config(task)).to(device)
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
            collate_fn=family.collate,
        )
        for e in range(epochs)
    ]
    scores = predict(
        model,
        encoded,
        32,
        0,
        device=device,
        precision=precision,
        scores_of=family.scores,
        collate_fn=family.collate,
    )
    return losses, scores


def comparable(task: str, scores: np.ndarray) -> np.ndarray:
    """`scores` as far as training determines them. A question's choices compete in one softmax, so
    a shift common to them has no gradient: it drifts on rounding noise that Adam scales up (by
    0.045 between bf16 and fp32 on the CPU while the choices' differences agreed within 0.004), and
    neither the loss nor accuracy reads it. Multiple choice's scores are compared less each
    question's mean; the other families' as they are."""
    return scores - scores.mean(axis=1, keepdims=True) if task == "multiple_choice" else scores


def widest(task: str) -> list[int]:
    """The (first) example whose batch is the widest, alone: a batch of a shape no other has."""
    encoded, _ = examples(task=task)
    collate = task_family(task).collate
    sizes = [collate(encoded, [i], 0)["input_ids"].shape[-1] for i in range(N)]
    return [int(np.argmax(sizes))]


def graphed_widths(task: str, widths: tuple[int, ...], batch_size: int, epochs: int = 2) -> set[int]:
    """The widths that epoch(graphs=True)'s full batches are padded to: a graph is captured per width."""
    encoded, _ = examples(task=task)
    collate = task_family(task).collate
    return {
        collate(encoded, b, 0, widths=widths)["input_ids"].shape[-1]
        for e in range(epochs)
        for b in epoch_batches(N, batch_size, 0, e)
        if len(b) == batch_size
    }


TASKS = pytest.mark.parametrize("task", TASK_NAMES)


@TASKS
def test_steps_never_wait_for_the_device(task):
    encoded, targets = examples(task=task)
    family = task_family(task)
    loss_of = family.loss_sum
    torch.manual_seed(0)
    model = family.model_class(config(task)).to(CUDA).train()
    optimizer = build_optimizer(model, "adamw", 1e-4, 0.01)
    assert optimizer.defaults["fused"]  # torch's fused AdamW on the GPU
    schedule = build_schedule(optimizer, 10, 0.1)
    full = widest(task)
    rest = [i for i in range(4, N) if i not in full][:5]
    batches = [family.collate(encoded, b, 0, targets, pin=True) for b in ([0, 1, 2, 3], full, rest)]  # 3 widths
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
    fp32_logits, bf16_logits = comparable(task, fp32_logits), comparable(task, bf16_logits)
    assert bf16_losses == pytest.approx(fp32_losses, rel=0.02)
    assert np.abs(bf16_logits - fp32_logits).max() < 0.05 * np.abs(fp32_logits).max() + 0.05


@TASKS
def test_fp32_on_the_gpu_equals_the_cpu(task):
    cpu_losses, cpu_logits = epoch(torch.device("cpu"), "fp32", task=task)
    gpu_losses, gpu_logits = epoch(CUDA, "fp32", task=task)
    assert gpu_losses == pytest.approx(cpu_losses, rel=1e-4)
    np.testing.assert_allclose(comparable(task, gpu_logits), comparable(task, cpu_logits), atol=1e-3)


@TASKS
def test_compile_equals_eager(task):
    eager_losses, eager_logits = epoch(CUDA, "fp32", task=task)
    compiled_losses, compiled_logits = epoch(CUDA, "fp32", compile_=True, task=task)
    assert compiled_losses == pytest.approx(eager_losses, rel=1e-4)
    np.testing.assert_allclose(comparable(task, compiled_logits), comparable(task, eager_logits), atol=1e-3)


# finetune.cuda_graphs serves every family: the trial (pipelines/finetuning/trial.py) wraps any
# family's model in GraphedModel on a GPU, refusing only several workers per trial (and the config
# grad_accum_steps > 1 or compile with it), so every family is checked here.
@TASKS
def test_cuda_graphs_equal_eager(task):
    """finetune.cuda_graphs: the whole model compiled and replayed as CUDA graphs (batches of 20
    padded to several of graph_widths(128), the last batch of 16 eager) trains as the eager model
    on the same batches, and no graph was skipped (a skip would leave the speed path silently eager)."""
    from torch._dynamo.utils import counters

    widths = graph_widths(128)
    assert len(graphed_widths(task, widths, 20)) >= 3  # a graph captured and replayed per width
    torch._dynamo.reset()
    counters.clear()
    eager_losses, eager_logits = epoch(CUDA, "fp32", widths=widths, batch_size=20, task=task)
    graphed_losses, graphed_logits = epoch(CUDA, "fp32", graphs=True, widths=widths, batch_size=20, task=task)
    assert counters["stats"]["unique_graphs"] >= 1
    assert counters["inductor"]["cudagraph_skips"] == 0
    assert graphed_losses == pytest.approx(eager_losses, rel=1e-3)
    np.testing.assert_allclose(comparable(task, graphed_logits), comparable(task, eager_logits), atol=1e-3)
