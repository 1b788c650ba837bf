"""Each config field is declared once: the model section's keys come from AlbertConfig (names, types,
docs), and which keys are settings comes from each field's metadata (pipelines/config/base.py `setting`)."""

import dataclasses
import inspect
import typing
from typing import ClassVar

import pytest
from pydantic.dataclasses import dataclass

from albert_model.config import AlbertConfig
from pipelines.config import SECTIONS, SETTINGS, Config, ModelSection, field_docs, load_config
from pipelines.config.base import STRICT, Section, attribute_docs, section_settings, setting
from pipelines.errors import ConfigError

# model.KEY as users write it -> its type -> a value the tiny preset accepts that differs from its own.
# A field added to, renamed in or retyped in AlbertConfig changes these keys: update the table on purpose.
MODEL_KEYS = {
    "embedding_size": ("int | None", 32),
    "hidden_size": ("int | None", 64),
    "num_hidden_layers": ("int | None", 2),
    "num_attention_heads": ("int | None", 4),
    "intermediate_size": ("int | None", 256),
    "num_hidden_groups": ("int | None", 2),
    "inner_group_num": ("int | None", 2),
    "hidden_act": ("str | None", "relu"),
    "hidden_dropout_prob": ("float | None", 0.1),
    "attention_probs_dropout_prob": ("float | None", 0.1),
    "max_position_embeddings": ("int | None", 1024),
    "type_vocab_size": ("int | None", 3),
    "initializer_range": ("float | None", 0.01),
    "layer_norm_eps": ("float | None", 0.001),
    "classifier_dropout_prob": ("float | None", 0.2),
    "num_labels": ("int | None", 3),
    "sharing": ("str | None", "ffn"),
}

# Every key that never changes a result, with why; written out so a mark added or lost shows here.
EXPECTED_SETTINGS = {
    "data.num_workers": "the examples are the same for any number of workers",
    "train.num_workers": "the run is exact for any worker count (tested within 1e-5); a resume may change it",
    "train.resize_check_s": "elastic resize cadence",
    "train.micro_batch_size": "accumulation computes the same update (tested within 1e-5)",
    "train.cpus_per_worker": "resources",
    "train.torch_threads": "threads",
    "train.loader_processes": "the same batches, made in a thread or a process",
    "train.compile": "speed",
    "train.activation_checkpointing": "memory",
    "train.checkpoint_every": "checkpoint cadence",
    "train.checkpoints_to_keep": "checkpoint retention",
    "train.eval_every": "evaluation cadence",
    "train.log_every": "logging cadence",
    "train.max_failures": "failure limit",
    "train.health": "recovery policy",
    "train.peak_tflops": "MFU reporting",
    "finetune.eval_batch_size": "evaluation batching",
    "finetune.compile": "speed",
    "finetune.cuda_graphs": "speed",
    "tune.max_concurrent_trials": "concurrency cap",
    "tune.resources_per_trial": "resources",
    "predict.output": "where a copy goes",
    "predict.batch_size": "batching",
    "predict.workers": "parallelism",
    "predict.in_process_bytes": "parallelism",
    "tracking.tensorboard": "experiment tracking",
    "tracking.mlflow_uri": "experiment tracking",
    "tracking.mlflow_experiment": "experiment tracking",
    "tracking.wandb": "experiment tracking",
    "tracking.wandb_project": "experiment tracking",
    "tracking.wandb_mode": "experiment tracking",
}


def test_albert_config_has_the_fields_the_model_section_is_known_to_have():
    hints = typing.get_type_hints(AlbertConfig)
    albert = {f.name: str(hints[f.name] | None) for f in dataclasses.fields(AlbertConfig) if f.name != "vocab_size"}
    assert albert == {key: type_ for key, (type_, _) in MODEL_KEYS.items()}


def test_the_model_section_is_the_preset_and_every_albert_field_typed_or_null():
    albert = [f.name for f in dataclasses.fields(AlbertConfig) if f.name != "vocab_size"]
    fields = dataclasses.fields(ModelSection)
    assert [f.name for f in fields] == ["preset", *albert]
    assert {f.name: str(f.type) for f in fields[1:]} == {key: type_ for key, (type_, _) in MODEL_KEYS.items()}
    assert all(getattr(ModelSection(), name) is None for name in albert)


def test_the_model_fields_are_declared_only_in_albert_config():
    source = inspect.getsource(ModelSection)
    assert not [key for key in MODEL_KEYS if f"    {key}:" in source]


def test_a_model_key_documents_albert_configs_field_and_what_null_means():
    docs, albert_docs = field_docs(ModelSection), attribute_docs(AlbertConfig)
    for key in MODEL_KEYS:
        assert docs[key].startswith(albert_docs[key].rstrip(".") + "; null"), key
    assert docs["hidden_size"] == "H: width of the transformer layers; null keeps the preset's."
    assert docs["layer_norm_eps"] == "Epsilon of every LayerNorm; null: 1e-12."
    assert (
        docs["hidden_dropout_prob"] == "Dropout on embeddings and sublayer outputs (v1 used 0.1, v2 uses 0); null: 0."
    )
    assert docs["sharing"].endswith("all, attention (only), ffn (only) or none; null: all.")


@pytest.mark.parametrize("key", MODEL_KEYS)
def test_every_model_key_reaches_the_albert_config(key):
    value = MODEL_KEYS[key][1]
    config = load_config(overrides=["model.preset=tiny", f"model.{key}={value}"])
    assert getattr(config.model.albert_config(vocab_size=100), key) == value
    assert getattr(load_config(overrides=["model.preset=tiny"]).model.albert_config(100), key) != value


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.hidden_size=abc", "model.hidden_size='abc': must be int | None"),
        ("model.initializer_range=[1]", "model.initializer_range=[1]: must be float | None"),
        ("model.sharing=3", "model.sharing=3: must be str | None"),
        ("model.num_labels=0", "model.num_labels=0: must be a positive integer"),
        ("model.vocab_size=10", "unknown config key 'model.vocab_size'"),
    ],
)
def test_a_bad_model_key_is_named_as_the_config_key(override, message):
    with pytest.raises(ValueError) as e:
        load_config(overrides=[override])
    assert str(e.value).startswith(message)


def test_the_settings_are_the_fields_marked_so():
    assert SETTINGS == EXPECTED_SETTINGS
    marked = {
        cls.key(f.name): f.metadata["setting"]
        for cls in (Config, *SECTIONS.values())
        for f in dataclasses.fields(cls)
        if "setting" in f.metadata
    }
    assert marked == EXPECTED_SETTINGS


@dataclass(config=STRICT)
class _Inner(Section):
    SECTION: ClassVar[str] = "toy.inner"

    a: int = dataclasses.field(default=1, metadata=setting("a's reason"))
    b: int = 2


@dataclass(config=STRICT)
class _Toy(Section):
    SECTION: ClassVar[str] = "toy"
    SUBSECTIONS: ClassVar[dict[str, type]] = {"inner": _Inner, "whole": _Inner}

    x: int = 0
    y: int = dataclasses.field(default=0, metadata=setting("y's reason"))
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    whole: _Inner = dataclasses.field(default_factory=_Inner, metadata=setting("all of it"))


def test_a_sections_settings_include_its_subsections_and_a_marked_subsection_is_one_key():
    assert section_settings(_Toy) == {"toy.y": "y's reason", "toy.inner.a": "a's reason", "toy.whole": "all of it"}
    assert _Toy(y=3) == _Toy(y=3) and _Toy().whole == _Inner()


def test_attribute_docs_reads_what_pydantic_reads():
    for cls in SECTIONS.values():
        if cls is not ModelSection:
            assert attribute_docs(cls) == field_docs(cls), cls


def test_predict_precision_is_checked_by_name():
    """predict.precision: one of auto, fp32, bf16, and torch's only (an ONNX export runs its own)."""
    assert load_config().predict.precision == "auto"
    assert load_config(overrides=["predict.precision=bf16"]).predict.precision == "bf16"
    with pytest.raises(ConfigError, match=r"predict.precision='fp16': must be one of auto, bf16, fp32"):
        load_config(overrides=["predict.precision=fp16"])
    onnx = ["predict.backend=onnx", "predict.onnx=model.onnx", "predict.precision=fp32"]
    with pytest.raises(ConfigError, match=r"predict.precision='fp32': applies to predict.backend=torch"):
        load_config(overrides=onnx)
