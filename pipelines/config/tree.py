"""The config tree: the root `Config` with its sections, the rules across sections (checked
whenever a Config is built), and the keys that never change a result (from their fields' metadata)."""

from __future__ import annotations

import dataclasses
import logging
import re
from dataclasses import field
from typing import ClassVar

from pydantic.dataclasses import dataclass

from ..errors import ConfigError
from .base import NEUTRAL, STRICT, Section, build_section, config_to_dict, section_settings, shown
from .distilling import DistillSection
from .glue import glue_preset
from .predicting import PredictSection
from .sections import CorpusSection, DataSection, ModelSection, TrainSection, VocabSection
from .tracking import TrackingSection
from .tuning import FinetuneSection, TuneSection

log = logging.getLogger(__name__)


@dataclass(config=STRICT)
class Config(Section):
    """One run: where outputs go and every stage's section."""

    SECTION: ClassVar[str] = ""

    run_dir: str = "runs/default"
    """Where every output goes: a local directory or s3://bucket/prefix."""
    corpus: CorpusSection = field(default_factory=CorpusSection)
    """The raw documents."""
    vocab: VocabSection = field(default_factory=VocabSection)
    """The SentencePiece vocabulary."""
    data: DataSection = field(default_factory=DataSection)
    """The pretraining examples."""
    model: ModelSection = field(default_factory=ModelSection)
    """The ALBERT architecture."""
    train: TrainSection = field(default_factory=TrainSection)
    """Pretraining."""
    finetune: FinetuneSection = field(default_factory=FinetuneSection)
    """Fine-tuning on a task: classification, regression or extractive question answering."""
    tune: TuneSection = field(default_factory=TuneSection)
    """The hyperparameter search over fine-tuning."""
    distill: DistillSection = field(default_factory=DistillSection)
    """A shallower student of the fine-tuned model."""
    predict: PredictSection = field(default_factory=PredictSection)
    """Batch prediction with the fine-tuned model."""
    tracking: TrackingSection = field(default_factory=TrackingSection)
    """Experiment tracking: TensorBoard, MLflow, W&B (all off by default)."""

    def __post_init__(self) -> None:
        self.require("run_dir", bool(self.run_dir), "must not be empty")
        check_rules(self)


SECTIONS: dict[str, type] = {
    "corpus": CorpusSection,
    "vocab": VocabSection,
    "data": DataSection,
    "model": ModelSection,
    "train": TrainSection,
    "finetune": FinetuneSection,
    "tune": TuneSection,
    "distill": DistillSection,
    "predict": PredictSection,
    "tracking": TrackingSection,
}
"""Section name -> its class, in the order of the tree."""

SETTINGS: dict[str, str] = {
    key: why for cls in (Config, *SECTIONS.values()) for key, why in section_settings(cls).items()
}
"""Key -> why it never changes a result, so changing it never makes a stage stale (--help marks them): the
fields marked `metadata=setting(why)`, a subsection so marked as one key (train.health)."""


NEUTRAL_KEYS: dict[str, object] = {
    cls.key(f.name): f.metadata[NEUTRAL]
    for cls in SECTIONS.values()
    for f in dataclasses.fields(cls)
    if NEUTRAL in f.metadata
}
"""key -> the value at which it computes what configs without it did (fields marked `metadata=neutral_at(...)`)."""


def neutral_keys(config: Config) -> set[str]:
    """The keys at their neutral value: they change none of config's results (and the finetune keys
    its task family does not read: pipelines/finetuning/families.unread_keys)."""
    return {key for key, value in NEUTRAL_KEYS.items() if getattr_key(config, key) == value}


def getattr_key(config: Config, key: str) -> object:
    section, _, name = key.partition(".")
    return getattr(getattr(config, section), name)


def check_rules(config: Config) -> None:
    """The rules that involve more than one section (and not the task families: those the entry
    points check, pipelines/finetuning/families/checks.py)."""
    task_configs(config)  # each task of an evaluation suite is a valid config of its own
    if config.distill.layers is not None and config.finetune.tasks:
        raise ConfigError(
            f"distill.layers={config.distill.layers}: distils the run's one fine-tuned model; an evaluation "
            "suite (finetune.tasks) has one per task: distil a task's with distill.teacher and its finetune keys"
        )
    if config.finetune.cuda_graphs and config.tune.workers_per_trial > 1:
        raise ConfigError(
            f"finetune.cuda_graphs needs one worker per trial (tune.workers_per_trial="
            f"{config.tune.workers_per_trial}): its graphs hold no DDP all-reduce"
        )
    if config.train.init_from is None:
        positions = config.model.albert_config(vocab_size=16).max_position_embeddings
        if config.data.max_seq_length > positions:
            raise ConfigError(
                f"data.max_seq_length={config.data.max_seq_length} exceeds the model's "
                f"max_position_embeddings={positions} (model.preset={config.model.preset})"
            )
        # the model the pretrain stage exports; a given finetune.pretrained is checked by the stage
        if config.finetune.pretrained is None and config.finetune.max_seq_length > positions:
            raise ConfigError(
                f"finetune.max_seq_length={config.finetune.max_seq_length} exceeds the pretrained model's "
                f"max_position_embeddings={positions} (model.preset={config.model.preset})"
            )


TASK_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
SUITE_ONLY = ("tasks", "glue_dir")
"""finetune keys of the suite as a whole, which a task's overrides may not set."""


def task_configs(config: Config) -> dict[str, Config]:
    """finetune.tasks as one config per task, in their order: the run's config with the task's GLUE
    preset (when its name is one and finetune.glue_dir is set) and then its own overrides applied to
    the finetune and tune sections. Empty without finetune.tasks. A bad task raises ConfigError
    naming it (finetune.tasks.NAME...)."""
    tasks = config.finetune.tasks or {}
    out = {}
    for name, spec in tasks.items():
        where = f"finetune.tasks.{name}"
        if not isinstance(name, str) or not TASK_NAME.fullmatch(name):
            raise ConfigError(
                f"finetune.tasks: task name {shown(name)} must be 1-64 lowercase letters, digits, - and _ "
                "(it names the task's folder)"
            )
        if not isinstance(spec, dict) or set(spec) - {"finetune", "tune"}:
            raise ConfigError(f"{where}={shown(spec)}: must be a mapping with finetune and/or tune overrides")
        preset = glue_preset(name)
        own_finetune, own_tune = spec.get("finetune") or {}, spec.get("tune") or {}
        for part, value in (("finetune", own_finetune), ("tune", own_tune)):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.{part}={shown(value)}: must be a mapping of {part} keys")
        if set(own_finetune) & set(SUITE_ONLY):
            raise ConfigError(f"{where}.finetune: {', '.join(SUITE_ONLY)} belong to the suite, not to one task")
        finetune = {**config_to_dict(config.finetune), "tasks": None, "glue_dir": None}
        tune = config_to_dict(config.tune)
        if preset is not None and config.finetune.glue_dir is not None:
            values = preset.overrides(config.finetune.glue_dir)
            finetune.update(values["finetune"])
            tune.update(values["tune"])
        elif preset is not None and "train_path" not in own_finetune:
            raise ConfigError(
                f"{where}: a GLUE task's name reads GLUE's files from finetune.glue_dir, which is null; "
                f"set it (the folder holding {preset.folder}/) or give the task its own finetune.train_path"
            )
        finetune.update(own_finetune)
        tune.update(own_tune)
        sections = {
            **{k: getattr(config, k) for k in SECTIONS if k not in ("finetune", "tune")},
            "finetune": build_section(FinetuneSection, finetune, where=f"{where}: "),
            "tune": build_section(TuneSection, tune, where=f"{where}: "),
        }
        out[name] = build_section(Config, {"run_dir": config.run_dir, **sections}, where=f"{where}: ")
    return out


def searched_overrides(config: Config) -> list[str]:
    """The finetune keys set away from their defaults that tune.space searches anyway (the space wins)."""
    defaults = FinetuneSection()
    return [
        key
        for key in config.tune.space
        if getattr(config.finetune, key.partition(".")[2]) != getattr(defaults, key.partition(".")[2])
    ]


def finetune_as_searched(config: Config) -> dict[str, object]:
    """config.finetune as config_to_dict gives it, with the keys tune.space searches at their
    defaults: no trial reads their configured value, so for a fingerprint it changes nothing (and
    at the default, a fingerprint taken before this rule is the same)."""
    searched = {key.partition(".")[2] for key in config.tune.space}
    defaults = config_to_dict(FinetuneSection())
    return {k: defaults[k] if k in searched else v for k, v in config_to_dict(config.finetune).items()}


__all__ = [
    "SECTIONS",
    "SETTINGS",
    "Config",
    "check_rules",
    "finetune_as_searched",
    "searched_overrides",
    "task_configs",
    "neutral_keys",
]
