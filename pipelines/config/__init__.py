"""The config tree every stage reads: sections as strict, documented dataclasses, loaded from YAML
plus `section.key=value` overrides (loading.py), with the rules across sections (tree.py)."""

from .base import Section, build_section, config_to_dict, field_docs
from .distilling import DistillSection
from .loading import build_arg_parser, dump_yaml, load_config, parse_cli
from .predicting import PredictSection
from .sections import CorpusSection, DataSection, ModelSection, TrainSection, VocabSection
from .tracking import TrackingSection
from .tree import SECTIONS, SETTINGS, Config, finetune_as_searched, neutral_keys, searched_overrides, task_configs
from .tuning import TUNABLE_KEYS, FinetuneSection, TuneSection

__all__ = [
    "SECTIONS",
    "SETTINGS",
    "TUNABLE_KEYS",
    "Config",
    "CorpusSection",
    "DataSection",
    "DistillSection",
    "FinetuneSection",
    "ModelSection",
    "PredictSection",
    "Section",
    "TrackingSection",
    "TrainSection",
    "TuneSection",
    "VocabSection",
    "build_arg_parser",
    "build_section",
    "config_to_dict",
    "dump_yaml",
    "field_docs",
    "load_config",
    "neutral_keys",
    "parse_cli",
    "finetune_as_searched",
    "searched_overrides",
    "task_configs",
]
