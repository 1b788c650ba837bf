"""The fine-tuning sections of the config tree: `finetune` (one trial's task and hyperparameters)
and `tune` (the Ray Tune search over them)."""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any, ClassVar

from pydantic import ValidationError
from pydantic.dataclasses import dataclass

from ..errors import ConfigError
from .base import STRICT, Section, neutral_at, one_error, setting, shown
from .sections import PRECISIONS

FINETUNE_INITS = ("pretrained", "random")
TUNE_SCHEDULERS = ("asha", "none")
TUNE_SEARCHES = ("random", "optuna")
# The finetune keys a search space may set: hyperparameters of one trial, not what data it reads.
TUNABLE_KEYS = (
    *("lr", "batch_size", "epochs", "warmup_ratio", "weight_decay", "classifier_dropout", "max_grad_norm"),
    "seed",  # a trial's initialisation and batch order; the split and subsamples stay the base config's
)
SPACE_RANGES = ("loguniform", "uniform", "randint")


@dataclass(config=STRICT)
class FinetuneSection(Section):
    """Fine-tuning a pretrained ALBERT on one task of a task family (finetune.task: classification,
    regression or multi-label classification of a table, token classification, multiple choice,
    extractive question answering); docs/finetuning.md#task-families lists them."""

    SECTION: ClassVar[str] = "finetune"

    pretrained: str | None = None
    """A transformers ALBERT directory (config.json, weights, spiece.model); null = {run_dir}/pretrain/hf."""
    init: str = "pretrained"
    """pretrained (its weights) or random (its architecture and tokenizer, fresh weights: the no-pretraining arm)."""
    train_path: str | None = None
    """Training table (csv, tsv, jsonl or parquet) or QA file (SQuAD .json, or .jsonl/.parquet rows);
    local or s3://; null = the embedded task (BBC News classification, or its cloze questions)."""
    eval_path: str | None = None
    """Evaluation table or QA file; null holds out finetune.eval_fraction of the training one (seeded;
    stratified by label, or by context for QA)."""
    text_column: str = "text"
    """Column holding the text (the first segment)."""
    text_pair_column: str | None = None
    """Column holding the second segment of a text pair; null for single texts."""
    label_column: str = "label"
    """Column holding the label: a class (any string or number); for regression, a number; for
    multi_label, the example's classes (a list in jsonl or parquet, or one text cell split at
    finetune.label_delimiter); for multiple_choice, the right choice's index (0-based) or letter (A, B, ...)."""
    context_column: str = "context"
    """multiple_choice, jsonl or parquet: the column of the passage the question is about (optional in the rows)."""
    question_column: str = "question"
    """multiple_choice, jsonl or parquet: the column of the question (or a sentence's start, as SWAG's)."""
    choices_column: str = "choices"
    """multiple_choice, jsonl or parquet: the column of the choices (a list; the same length in a file)."""
    tokens_column: str = "tokens"
    """token_classification, jsonl or parquet: the column holding a sentence's tokens (a list)."""
    tags_column: str = "tags"
    """token_classification, jsonl or parquet: the column holding a tag per token (a list of the same length)."""
    conll_tag_column: int = -1
    """token_classification, CoNLL files (.conll, .txt): the tag's column, 0-based after the token
    (column 0); -1 is the last (CoNLL-2003's named entities)."""
    label_delimiter: str = "|"
    """multi_label: what separates the classes in a text label cell (csv, tsv, or a string in jsonl
    or parquet); a list is read as it is."""
    task: str = "classification"
    """classification, regression, multi_label (any number of classes per text, one sigmoid each),
    token_classification (a tag per word: named entities, chunks; CoNLL or jsonl/parquet),
    multiple_choice (SWAG's csv, RACE's json, or jsonl/parquet rows) or question_answering
    (extractive, SQuAD v1.1/v2.0)."""
    max_seq_length: int = 512
    """Tokens per example, [CLS] and [SEP]s included; longer texts are truncated (QA: windowed)."""
    max_query_length: int = 64
    """question_answering: a question's pieces beyond this many are cut."""
    doc_stride: int = 128
    """question_answering: pieces between the starts of a long context's overlapping windows."""
    n_best_size: int = 20
    """question_answering: start and end candidates per window in the answer search."""
    max_answer_length: int = 30
    """question_answering: the longest answer, in pieces."""
    eval_fraction: float = 0.2
    """Share of the training data held out for evaluation when finetune.eval_path is null."""
    max_train_examples: int | None = None
    """Use a seeded (stratified) subsample of this many training examples (QA: questions; token
    classification: sentences); null uses all."""
    max_eval_examples: int | None = None
    """Use a seeded (stratified) subsample of this many evaluation examples (QA: questions; token
    classification: sentences); null uses all."""
    lr: float = 2e-5
    """Peak AdamW learning rate (linear warmup, then linear decay to 0)."""
    batch_size: int = 32
    """Sequences per optimizer step, summed over a trial's workers."""
    grad_accum_steps: int = field(default=1, metadata=neutral_at(1))
    """Micro-batches per optimizer step on each worker: the same batch_size in memory this many
    times smaller (large and xxlarge at the paper's batch sizes on one GPU); gradients add up before
    the step."""
    epochs: int = 3
    """Passes over the training examples; metrics are reported after each."""
    warmup_ratio: float = 0.1
    """Share of the optimizer steps spent warming the learning rate up from 0."""
    weight_decay: float = 0.01
    """Decoupled AdamW weight decay (not on LayerNorm or bias parameters)."""
    classifier_dropout: float = 0.1
    """Dropout on the pooled output before the classifier (question answering's head has none, as transformers')."""
    max_grad_norm: float = 1.0
    """Clip the gradient norm to this."""
    eval_batch_size: int = field(default=64, metadata=setting("evaluation batching"))
    """Sequences per evaluation batch."""
    precision: str = "auto"
    """auto (bf16 on GPU, fp32 on CPU), bf16 (autocast; fp32 weights, optimizer and loss) or fp32."""
    compile: bool = field(default=False, metadata=setting("speed"))
    """torch.compile the layer groups: a slower first epoch, faster after only where the GPU bounds a step."""
    cuda_graphs: bool = field(default=False, metadata=setting("speed"))
    """On a GPU: the whole model compiled and replayed as CUDA graphs (torch.compile mode
    reduce-overhead), batches padded to one of 4 widths; a compilation per width, so it pays in
    long fine-tunings at short sequences, where the host bounds a step. One worker per trial; no effect on CPU."""
    seed: int = 42
    """Seed of the split, the subsamples, the classifier's initialisation and the batch order;
    searched in tune.space, a trial's seed changes only its initialisation and batch order (every
    trial is scored on the same split)."""
    column_names: list[str] | None = field(default=None, metadata=neutral_at(None))
    """csv/tsv tables without a header row (GLUE's CoLA): the names of their columns, in order;
    null reads the first row as the header."""
    extra_eval_paths: dict[str, str] | None = field(default=None, metadata=neutral_at(None))
    """name -> a further evaluation file (the layout of finetune.eval_path), scored with the best
    model once the search is done and reported beside it (MNLI's mismatched dev set, a labelled
    test set); null: none."""
    compare_random: bool = field(default=False, metadata=neutral_at(False))
    """Also search the task from a random initialisation (finetune.init=random, the same search
    otherwise): the no-pretraining arm, exported under random/ and reported beside the pretrained one."""
    exit_heads: bool = field(default=False, metadata=neutral_at(False))
    """Train the head at every depth (PABEE's loss: the depths' losses weighted by depth), so that
    predict and serve can stop early (predict.exit_patience, predict.exit_entropy); the sequence
    families. The export is a standard ALBERT and answers at full depth unless told to exit."""
    glue_dir: str | None = field(default=None, metadata=neutral_at(None))
    """GLUE's folder (CoLA/, SST-2/, MRPC/, QQP/, STS-B/, MNLI/, QNLI/, RTE/, WNLI/ with their train
    and dev .tsv files): a finetune.tasks entry named after a GLUE task reads its files with that
    task's columns, kind and metric."""
    tasks: dict[str, dict] | None = field(default=None, metadata=neutral_at(None))
    """An evaluation suite: task name -> its overrides, {finetune: {KEY: value}, tune: {KEY: value}}
    over this section and the tune section. Each task is searched by Ray Tune and exported under
    finetune/<name>/, is its own unit of caching, and has a row in report.md's table. Names are
    lowercase letters, digits, - and _; a GLUE task's name (cola, sst2, mrpc, qqp, stsb, mnli, qnli,
    rte, wnli) with finetune.glue_dir set reads GLUE's files. null: one task, this section's."""

    def __post_init__(self) -> None:
        for name in ("pretrained", "train_path", "eval_path", "text_pair_column", "glue_dir"):
            self.require(name, getattr(self, name) != "", "must not be empty (use null)")
        self.require(
            "eval_path",
            self.eval_path is None or self.train_path is not None,
            "needs finetune.train_path (the embedded task has its own split)",
        )
        self.require("init", self.init in FINETUNE_INITS, f"must be one of {', '.join(FINETUNE_INITS)}")
        self.require("text_column", bool(self.text_column), "must not be empty")
        self.require("label_column", bool(self.label_column), "must not be empty")
        self.require("label_delimiter", bool(self.label_delimiter.strip()), "must not be empty or blank")
        self.require("conll_tag_column", self.conll_tag_column != 0, "must not be 0 (the token's column)")
        for name in ("tokens_column", "tags_column", "question_column", "choices_column", "context_column"):
            self.require(name, bool(getattr(self, name)), "must not be empty")
        self.require("max_seq_length", self.max_seq_length >= 4, "must be >= 4")
        self.require("eval_fraction", 0 < self.eval_fraction < 1, "must be in (0, 1)")
        for name in ("max_train_examples", "max_eval_examples"):
            self.require(name, getattr(self, name) is None or getattr(self, name) >= 1, "must be >= 1 or null")
        self.require("lr", self.lr > 0, "must be > 0")
        self.require("grad_accum_steps", self.grad_accum_steps >= 1, "must be >= 1")
        self.require(
            "grad_accum_steps",
            self.grad_accum_steps == 1 or not self.cuda_graphs,
            "must be 1 with finetune.cuda_graphs (a graph replays whole batches)",
        )
        for name in ("batch_size", "epochs", "eval_batch_size", "max_query_length", "doc_stride", "n_best_size"):
            self.require(name, getattr(self, name) >= 1, "must be >= 1")
        self.require("warmup_ratio", 0 <= self.warmup_ratio < 1, "must be in [0, 1)")
        self.require("weight_decay", self.weight_decay >= 0, "must be >= 0")
        self.require("classifier_dropout", 0 <= self.classifier_dropout < 1, "must be in [0, 1)")
        self.require("max_grad_norm", self.max_grad_norm > 0, "must be > 0")
        self.require("precision", self.precision in PRECISIONS, f"must be one of {', '.join(PRECISIONS)}")
        self.require(
            "cuda_graphs",
            not (self.cuda_graphs and self.compile),
            "compiles the whole model: leave finetune.compile (the layer groups) false",
        )
        self.require("max_answer_length", self.max_answer_length >= 1, "must be >= 1")
        self.require("seed", self.seed >= 0, "must be >= 0")
        names = self.column_names
        self.require(
            "column_names",
            names is None or (bool(names) and all(n for n in names) and len(set(names)) == len(names)),
            "must be a non-empty list of distinct, non-empty names, or null",
        )
        for name, path in (self.extra_eval_paths or {}).items():
            self.require("extra_eval_paths", bool(name) and bool(path), "names and paths must not be empty")
        self.require(
            "extra_eval_paths",
            not self.extra_eval_paths or self.train_path is not None,
            "needs finetune.train_path (the files are read as the training one)",
        )
        self.require("tasks", self.tasks is None or bool(self.tasks), "must name at least one task, or be null")


def _default_space() -> dict[str, Any]:
    # ALBERT's GLUE recipes (run_glue.sh): lr 1e-5..5e-5, batch 16/32/128, warmup 6-25% of the
    # steps, about 3 to 10 epochs; dropout 0.1 and weight decay 0.01 stay fixed in `finetune`.
    return {
        "finetune.lr": [1e-5, 2e-5, 3e-5, 5e-5],
        "finetune.batch_size": [16, 32, 128],
        "finetune.warmup_ratio": [0.06, 0.1, 0.25],
        "finetune.epochs": [3, 5, 10],
    }


@dataclass(config=STRICT)
class TuneSection(Section):
    """The Ray Tune search over fine-tuning hyperparameters."""

    SECTION: ClassVar[str] = "tune"

    num_samples: int = 8
    """Trials to run (each draws its hyperparameters from tune.space)."""
    max_concurrent_trials: int | None = field(default=None, metadata=setting("concurrency cap"))
    """Most trials running at once; null runs as many as the cluster's resources fit."""
    scheduler: str = "asha"
    """asha (stop trials whose metric lags after each epoch) or none (every trial runs all its epochs)."""
    grace_period: int = 1
    """ASHA: epochs every trial runs before it may be stopped."""
    reduction_factor: int = 3
    """ASHA: only the best 1/reduction_factor of the trials at a rung go on to the next."""
    search: str = "random"
    """random (independent draws from tune.space) or optuna (TPE)."""
    metric: str | None = None
    """Eval metric to maximise: accuracy, macro_f1, mcc (classification), pearson, spearman (regression),
    micro_f1, macro_f1, subset_accuracy (multi_label), f1, precision, recall, accuracy
    (token_classification: entities, conlleval's), accuracy (multiple_choice), f1, exact
    (question_answering); null = the task's first."""
    space: dict = field(default_factory=_default_space)
    """finetune key -> a value, a list of choices, or {loguniform|uniform|randint: [lo, hi]} (randint
    inclusive); it overrides that finetune key."""
    workers_per_trial: int = 1
    """Training processes per trial: 1 runs the trial in one process, more run it as a Ray Train DDP job."""
    resources_per_trial: dict | None = field(default=None, metadata=setting("resources"))
    """Resources of each training process, e.g. {CPU: 4, GPU: 1}; null = {CPU: 1}, plus GPU: 1 when the
    cluster has GPUs. A trial (tune.workers_per_trial of them) that a cluster nothing adds nodes to
    cannot hold is refused before the search starts."""
    seed: int = 0
    """Seed of the search algorithm's draws."""
    repeats: int = field(default=0, metadata=neutral_at(0))
    """After the search, train the best configuration again with this many other seeds
    (finetune.seed + 1, + 2, ...) and report the metric's mean and standard deviation over the best
    trial and them (fine-tuning ALBERT is unstable across seeds); 0: no repeats."""

    def __post_init__(self) -> None:
        self.require("num_samples", self.num_samples >= 1, "must be >= 1")
        self.require("repeats", self.repeats >= 0, "must be >= 0")
        self.require(
            "max_concurrent_trials",
            self.max_concurrent_trials is None or self.max_concurrent_trials >= 1,
            "must be >= 1 or null",
        )
        self.require("scheduler", self.scheduler in TUNE_SCHEDULERS, f"must be one of {', '.join(TUNE_SCHEDULERS)}")
        self.require("grace_period", self.grace_period >= 1, "must be >= 1")
        self.require("reduction_factor", self.reduction_factor >= 2, "must be >= 2")
        self.require("search", self.search in TUNE_SEARCHES, f"must be one of {', '.join(TUNE_SEARCHES)}")
        self.require("workers_per_trial", self.workers_per_trial >= 1, "must be >= 1")
        resources = self.resources_per_trial or {}
        self.require(
            "resources_per_trial",
            all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf
                for k, v in resources.items()
            ),
            "must map resource names (CPU, GPU, ...) to finite amounts >= 0",
        )
        self.require("seed", self.seed >= 0, "must be >= 0")
        for key, spec in self.space.items():
            self._check_dimension(key, spec)

    def _check_dimension(self, key: Any, spec: Any) -> None:
        def fail(why: str) -> None:
            raise ConfigError(f"tune.space[{shown(key)}]={shown(spec)}: {why}")

        name = key[len("finetune.") :] if isinstance(key, str) and key.startswith("finetune.") else None
        if name not in TUNABLE_KEYS:
            fail(f"keys are finetune.KEY with KEY one of {', '.join(TUNABLE_KEYS)}")
        if isinstance(spec, dict):
            if len(spec) != 1 or next(iter(spec)) not in SPACE_RANGES:
                fail(f"a range is one of {', '.join(f'{{{r}: [lo, hi]}}' for r in SPACE_RANGES)}")
            kind, bounds = next(iter(spec.items()))
            if not (
                isinstance(bounds, list)
                and len(bounds) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
            ):
                fail("the range [lo, hi] must be two numbers")
            if not bounds[0] < bounds[1]:
                fail("the range must be [lo, hi] with lo < hi")
            if kind == "randint" and not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
                fail("randint bounds must be integers")
            if kind == "loguniform" and bounds[0] <= 0:
                fail("loguniform bounds must be > 0")
            values = bounds
        else:
            values = spec if isinstance(spec, list) else [spec]
            if not values:
                fail("a list of choices must not be empty")
        for value in values:
            try:  # the same check as finetune.KEY=value on the command line
                FinetuneSection(**{name: value})
            except ValidationError as e:
                fail(one_error(e, FinetuneSection))


__all__ = [
    "FINETUNE_INITS",
    "SPACE_RANGES",
    "TUNABLE_KEYS",
    "TUNE_SCHEDULERS",
    "TUNE_SEARCHES",
    "FinetuneSection",
    "TuneSection",
]
