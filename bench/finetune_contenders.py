"""The two sides of bench/finetune_speed.py: our fine-tuning step and transformers' Trainer step on
the same weights and host batch, for each task family timed (what each side runs is in that
script's docstring)."""

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
from pipelines.finetuning.loop import GraphedModel, build_schedule, collate, finetune_step  # noqa: E402
from pipelines.train.build import build_optimizer  # noqa: E402
from pipelines.train.parallel import apply_compile  # noqa: E402

NUM_LABELS, LR, WEIGHT_DECAY, EPS, MAX_GRAD_NORM = 5, 2e-5, 0.01, 1e-6, 1.0
SCHEDULE_STEPS = 100_000  # the linear decay's length: far beyond any run here, so the lr stays ~2e-5
TASKS = ("classification", "question_answering")  # the families whose batches make_batch builds


def make_batch(
    batch_size: int, seq: int, vocab_size: int, padded: bool, pin: bool, seed: int = 0, task: str = "classification"
) -> dict[str, torch.Tensor]:
    """A host batch as fine-tuning collates one: [CLS] ids [SEP] ids [SEP], the second segment's
    token types 1; `labels` in [0, NUM_LABELS) (classification) or a (start, end) row inside the
    second segment (question_answering)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq // 2, seq + 1, batch_size) if padded else np.full(batch_size, seq)
    encoded = []
    for n in lengths:
        ids = rng.integers(5, vocab_size, n).tolist()
        half = n // 2
        ids[0], ids[half - 1], ids[-1] = 2, 3, 3  # [CLS] ... [SEP] ... [SEP]
        encoded.append((ids, [0] * half + [1] * (n - half)))
    if task == "question_answering":
        rows = []
        for n in lengths:
            start = int(rng.integers(n // 2, n - 1))
            rows.append((start, min(n - 2, start + int(rng.integers(0, 8)))))
        targets = torch.tensor(rows)
    else:
        targets = torch.from_numpy(rng.integers(0, NUM_LABELS, batch_size))
    return collate(encoded, list(range(batch_size)), 0, targets, pin)


class Ours:
    """Fine-tuning's own step on our model of the task (its family's loss)."""

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

    def step(self) -> torch.Tensor:
        """One optimizer step; the batch's mean loss (on the device)."""
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
        return loss_sum / n


class Transformers:
    """transformers' model of the task (its class of our class's name) stepped as Trainer's inner
    loop steps it."""

    def __init__(self, weights: torch.nn.Module, batch, device: torch.device, precision: str, work: str):
        import transformers

        hf = weights.config.to_hf_dict()
        if isinstance(weights, AlbertForQuestionAnswering):
            hf["num_labels"] = 2  # its qa_outputs is num_labels wide: a start and an end logit
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
        if isinstance(weights, AlbertForQuestionAnswering):  # its targets by name, as its collator gives them
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
    torch.manual_seed(seed)
    return task_family(task).model_class(config)


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
    """ours, transformers (and ours_compiled, ours_graphs) with the same initial weights, on the same batch."""
    weights = build_weights(config, task=task)
    makers = {
        "ours": lambda: Ours(weights, batch, device, precision, compile_=False, task=task),
        "transformers": lambda: Transformers(weights, batch, device, precision, work),
    }
    if compiled:
        makers["ours_compiled"] = lambda: Ours(weights, batch, device, precision, compile_=True, task=task)
    if graphs:
        makers["ours_graphs"] = lambda: Ours(weights, batch, device, precision, compile_=False, graphs=True, task=task)
    return makers
