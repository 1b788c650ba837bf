"""The two sides of bench/finetune_speed.py: our fine-tuning step and transformers' Trainer step on
the same weights and host batch, for each task of pipelines/finetuning/families/'s FAMILIES (what
each side runs is in that script's docstring):

- classification, regression, multi_label: our AlbertForSequenceClassification and the sequence
  family's loss (cross-entropy over 5 labels; MSE of one output; BCE over 5 labels, each example's
  mean over its labels) against transformers' AlbertForSequenceClassification (problem_type
  inferred; inferred from num_labels=1; "multi_label_classification" with float labels);
- token_classification: our AlbertForTokenClassification and the family's cross-entropy over the
  tagged positions (each word's first piece; [CLS], [SEP], the other pieces and padding carry -100)
  against transformers' AlbertForTokenClassification with the same `labels` [B, S];
- multiple_choice: our AlbertForMultipleChoice and the family's cross-entropy over a question's 4
  choices, on the family's [B, choices, S] batch, against transformers' AlbertForMultipleChoice
  with `labels` the right choice's index;
- question_answering: our AlbertForQuestionAnswering and the family's start and end cross-entropy
  against transformers' AlbertForQuestionAnswering with start_positions and end_positions."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from albert_model import AlbertConfig, AlbertForQuestionAnswering  # noqa: E402
from albert_model.hf import to_hf_state_dict  # noqa: E402
from pipelines.finetuning.families import task_family  # noqa: E402
from pipelines.finetuning.families.token_classification.training import IGNORED  # noqa: E402
from pipelines.finetuning.loop import GraphedModel, build_schedule, finetune_step  # noqa: E402
from pipelines.train.build import build_optimizer  # noqa: E402
from pipelines.train.parallel import apply_compile  # noqa: E402

NUM_LABELS, LR, WEIGHT_DECAY, EPS, MAX_GRAD_NORM = 5, 2e-5, 0.01, 1e-6, 1.0
SCHEDULE_STEPS = 100_000  # the linear decay's length: far beyond any run here, so the lr stays ~2e-5
TASKS = (  # every finetune.task of FAMILIES (tests/bench checks): make_batch builds each one's batch
    "classification",
    "regression",
    "multi_label",
    "token_classification",
    "multiple_choice",
    "question_answering",
)
CHOICES = 4  # multiple_choice: the choices of each question
WORD_START = 0.75  # token_classification: the chance that a piece begins a word (carries a tag)
GRAPHS_UNSUPPORTED: dict[str, str] = {}
"""Tasks whose model GraphedModel (finetune.cuda_graphs) cannot run, with the reason: their
ours_graphs contender is skipped and the reason recorded as its error (none today)."""


def num_labels_of(task: str) -> int:
    """The config's num_labels for the task: 1 for regression (one output), NUM_LABELS for the
    others (multiple_choice's and question_answering's heads are 1 and 2 wide regardless)."""
    return 1 if task == "regression" else NUM_LABELS


def make_batch(
    batch_size: int, seq: int, vocab_size: int, padded: bool, pin: bool, seed: int = 0, task: str = "classification"
) -> dict[str, torch.Tensor]:
    """A host batch of `task` as its family's collate builds one from random ids, every sequence
    `seq` long or (padded) each of a length drawn from [seq/2, seq] and padded to the longest:

    - classification, regression, multi_label, question_answering: [CLS] ids [SEP] ids [SEP], the
      second segment's token types 1; `labels` in [0, NUM_LABELS) (classification), a float
      (regression), NUM_LABELS floats of 0 or 1 (multi_label), or a (start, end) row inside the
      second segment (question_answering);
    - token_classification: [CLS] ids [SEP], token types 0; `labels` [B, S] a tag in [0, NUM_LABELS)
      at each word's first piece (position 1 and then a piece in WORD_START), IGNORED (-100) at
      [CLS], [SEP], the words' other pieces and the padding, as token classification's
      encode_split lays them out;
    - multiple_choice: CHOICES sequences per question, each [CLS] ids [SEP] ids [SEP] of its own
      length, the inputs [B, CHOICES, S] (multiple choice's collate); `labels` the right choice's index."""
    rng = np.random.default_rng(seed)
    rows = batch_size * CHOICES if task == "multiple_choice" else batch_size
    lengths = rng.integers(seq // 2, seq + 1, rows) if padded else np.full(rows, seq)
    encoded = []
    for n in lengths:
        ids = rng.integers(5, vocab_size, n).tolist()
        if task == "token_classification":
            ids[0], ids[-1] = 2, 3  # [CLS] ... [SEP]
            encoded.append((ids, [0] * n))
            continue
        half = n // 2
        ids[0], ids[half - 1], ids[-1] = 2, 3, 3  # [CLS] ... [SEP] ... [SEP]
        encoded.append((ids, [0] * half + [1] * (n - half)))
    if task == "question_answering":
        spans = []
        for n in lengths:
            start = int(rng.integers(n // 2, n - 1))
            spans.append((start, min(n - 2, start + int(rng.integers(0, 8)))))
        targets = torch.tensor(spans)
    elif task == "token_classification":
        tags = np.full((batch_size, seq), IGNORED, dtype=np.int64)
        for i, n in enumerate(lengths):
            starts = np.flatnonzero(rng.random(n - 2) < WORD_START) + 1  # first pieces among 1 .. n-2
            starts = np.union1d(starts, [1])  # a sentence has a word
            tags[i, starts] = rng.integers(0, NUM_LABELS, len(starts))
        targets = torch.from_numpy(tags)
    elif task == "multiple_choice":
        encoded = [encoded[i : i + CHOICES] for i in range(0, rows, CHOICES)]  # a question's choices
        targets = torch.from_numpy(rng.integers(0, CHOICES, batch_size))
    elif task == "regression":
        targets = torch.from_numpy(rng.uniform(0.0, 5.0, batch_size).astype(np.float32))
    elif task == "multi_label":
        targets = torch.from_numpy(rng.integers(0, 2, (batch_size, NUM_LABELS)).astype(np.float32))
    else:
        targets = torch.from_numpy(rng.integers(0, NUM_LABELS, batch_size))
    return task_family(task).collate(encoded, list(range(batch_size)), 0, targets, pin)


def loss_count(batch: dict[str, torch.Tensor], task: str) -> int:
    """What transformers' loss of the task averages over: the tagged positions (token_classification)
    or the examples (the others). Ours sums and divides by the examples (finetune_step)."""
    labels = batch["labels"]
    return int((labels != IGNORED).sum()) if task == "token_classification" else len(labels)


class Ours:
    """Fine-tuning's own step on our model of the task (its family's loss). The loss it returns is
    the family's summed loss over loss_count, as transformers averages it; the step itself
    (finetune_step) divides by the examples, so for token_classification its gradient is the tagged
    positions per sequence times transformers' (AdamW's update barely changes with that scale)."""

    def __init__(
        self,
        weights: torch.nn.Module,
        batch,
        device: torch.device,
        precision: str,
        compile_: bool,
        graphs: bool = False,
        task: str = "classification",
    ):
        self.model = copy.deepcopy(weights).to(device).train()
        if compile_:
            apply_compile(self.model)
        self.stepped = GraphedModel(self.model, len(batch["labels"])) if graphs else self.model
        self.optimizer = build_optimizer(self.model, "adamw", LR, WEIGHT_DECAY)
        self.schedule = build_schedule(self.optimizer, SCHEDULE_STEPS, 0.0)
        self.batch, self.device, self.precision = batch, device, precision
        self.loss_of = task_family(task).loss_sum
        self.count = loss_count(batch, task)

    def step(self) -> torch.Tensor:
        """One optimizer step; the batch's mean loss (on the device), as transformers averages it."""
        n = len(self.batch["labels"])
        loss_sum = finetune_step(
            self.stepped,
            self.optimizer,
            self.schedule,
            self.batch,
            n,
            MAX_GRAD_NORM,
            self.loss_of,
            self.device,
            self.precision,
        )
        return loss_sum / self.count


class Transformers:
    """transformers' model of the task (its class of our class's name, the family's problem_type)
    stepped as Trainer's inner loop steps it."""

    def __init__(
        self,
        weights: torch.nn.Module,
        batch,
        device: torch.device,
        precision: str,
        work: str,
        task: str = "classification",
    ):
        import transformers

        hf = weights.config.to_hf_dict()
        if isinstance(weights, AlbertForQuestionAnswering):
            hf["num_labels"] = 2  # its qa_outputs is num_labels wide: a start and an end logit
        if task_family(task).problem_type is not None:  # multi_label: BCE on float labels
            hf["problem_type"] = task_family(task).problem_type
        config = transformers.AlbertConfig(**hf, attn_implementation="sdpa")
        model = getattr(transformers, type(weights).__name__)(config)
        model.load_state_dict(to_hf_state_dict(weights))
        cuda = device.type == "cuda"
        args = transformers.TrainingArguments(
            output_dir=work,
            bf16=precision == "bf16",
            use_cpu=not cuda,
            per_device_train_batch_size=len(batch["labels"]),
            learning_rate=LR,
            weight_decay=WEIGHT_DECAY,
            adam_epsilon=EPS,
            max_grad_norm=MAX_GRAD_NORM,
            lr_scheduler_type="linear",
            warmup_steps=0,
            optim="adamw_torch_fused" if cuda else "adamw_torch",
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            seed=0,
        )
        self.trainer = trainer = transformers.Trainer(model=model, args=args)
        # What Trainer._inner_training_loop prepares before its first step (one device, no DeepSpeed).
        trainer.create_optimizer()
        self.model, trainer.optimizer = trainer.accelerator.prepare(trainer.model, trainer.optimizer)
        trainer.create_scheduler(num_training_steps=SCHEDULE_STEPS)
        trainer.model_wrapped = self.model
        trainer.current_gradient_accumulation_steps = 1
        # Its targets by name, as its collator gives them: `labels` as ours for the other tasks (a
        # class, float(s), a choice's index, or [B, S] tags with -100 where ours ignores a position).
        if isinstance(weights, AlbertForQuestionAnswering):
            batch = dict(batch)
            labels = batch.pop("labels")
            batch["start_positions"], batch["end_positions"] = labels[:, 0].contiguous(), labels[:, 1].contiguous()
            if labels.is_pinned():
                batch = {k: v.pin_memory() for k, v in batch.items()}
        self.batch = batch

    def step(self) -> torch.Tensor:
        """One optimizer step; the batch's mean loss (on the device)."""
        t = self.trainer
        on_device = {k: v.to(t.args.device) for k, v in self.batch.items()}  # its DataLoader's copy
        samples, num_items_in_batch = t.get_batch_samples(iter([on_device]), 1, t.args.device)
        loss = t.training_step(self.model, samples[0], num_items_in_batch)
        t.accelerator.clip_grad_norm_(self.model.parameters(), t.args.max_grad_norm)
        t.optimizer.step()
        if not t.accelerator.optimizer_step_was_skipped:
            t.lr_scheduler.step()
        self.model.zero_grad()
        return loss


def build_weights(config: AlbertConfig, seed: int = 0, task: str = "classification") -> torch.nn.Module:
    """The task's model (its family's), its head num_labels_of(task) wide."""
    torch.manual_seed(seed)
    return task_family(task).model_class(config.replace(num_labels=num_labels_of(task)))


def build_contenders(
    config: AlbertConfig,
    batch: dict[str, torch.Tensor],
    device: torch.device,
    precision: str,
    work: str,
    compiled: bool = False,
    graphs: bool = False,
    task: str = "classification",
) -> dict:
    """ours, transformers (and ours_compiled, ours_graphs) with the same initial weights, on the same
    batch. A task of GRAPHS_UNSUPPORTED gets an ours_graphs that raises its reason (measure records it)."""
    weights = build_weights(config, task=task)
    makers = {
        "ours": lambda: Ours(weights, batch, device, precision, compile_=False, task=task),
        "transformers": lambda: Transformers(weights, batch, device, precision, work, task=task),
    }
    if compiled:
        makers["ours_compiled"] = lambda: Ours(weights, batch, device, precision, compile_=True, task=task)
    if graphs and task in GRAPHS_UNSUPPORTED:
        makers["ours_graphs"] = lambda: unsupported(
            f"finetune.cuda_graphs skipped for {task}: {GRAPHS_UNSUPPORTED[task]}"
        )
    elif graphs:
        makers["ours_graphs"] = lambda: Ours(weights, batch, device, precision, compile_=False, graphs=True, task=task)
    return makers


def unsupported(reason: str):
    raise NotImplementedError(reason)
