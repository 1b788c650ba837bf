"""Numbers as users write them (issue #43): `1e-5`, `5E-4`, `1E5`, `.5`, `-.5e-3` are floats and
`1_000` an int wherever the config expects a number (a `section.key=value` override, a YAML file, a
tune.space range or choice), as YAML 1.2 reads them; text that is not a number stays text and is
refused by a number key in one line naming it; a value too large for a float is refused as infinite."""

import pytest

from pipelines.config import Config, dump_yaml, load_config
from pipelines.config.bounded_yaml import load_yaml
from pipelines.errors import ConfigError

FLOATS = [("1e-5", 1e-5), ("5E-4", 5e-4), ("1E5", 1e5), (".5", 0.5), ("+.5", 0.5), ("2.5e3", 2500.0)]
"""Positive, as every float key of the config is; `-.5e-3` is tested apart."""


@pytest.mark.parametrize("text, value", [*FLOATS, ("-.5e-3", -0.5e-3), ("-1E-5", -1e-5)])
def test_a_float_written_any_usual_way_is_a_float(text, value):
    assert load_yaml(text) == value and isinstance(load_yaml(text), float)


@pytest.mark.parametrize("text, value", FLOATS)
def test_float_notations_in_an_override(text, value):
    assert load_config(None, [f"train.health.spike_threshold={text}"]).train.health.spike_threshold == value
    assert load_config(None, [f"finetune.weight_decay={text}"]).finetune.weight_decay == value


@pytest.mark.parametrize("text, value", FLOATS)
def test_float_notations_in_a_yaml_file(tmp_path, text, value):
    path = tmp_path / "run.yaml"
    path.write_text(f"finetune:\n  weight_decay: {text}\ntrain:\n  health:\n    spike_threshold: {text}\n")
    config = load_config(str(path))
    assert config.finetune.weight_decay == value and config.train.health.spike_threshold == value


@pytest.mark.parametrize("text, value", FLOATS)
def test_float_notations_in_a_tune_space(tmp_path, text, value):
    choices = load_config(None, [f"tune.space={{finetune.weight_decay: [{text}, 0]}}"]).tune.space
    assert choices == {"finetune.weight_decay": [value, 0]}
    ranged = load_config(None, [f"tune.space={{finetune.weight_decay: {{uniform: [{text}, 1E6]}}}}"]).tune.space
    assert ranged == {"finetune.weight_decay": {"uniform": [value, 1e6]}}
    path = tmp_path / "run.yaml"
    path.write_text(f"tune:\n  space:\n    finetune.weight_decay: {{loguniform: [{text}, 1E6]}}\n")
    assert load_config(str(path)).tune.space == {"finetune.weight_decay": {"loguniform": [value, 1e6]}}


def test_a_negative_float_with_a_leading_dot_is_read_as_a_number_and_checked_as_one(tmp_path):
    """No float key takes a negative value: the refusal is the key's range, not "must be float"."""
    refused = "finetune.weight_decay=-0.0005: must be >= 0"
    with pytest.raises(ConfigError, match=f"^{refused}$"):
        load_config(None, ["finetune.weight_decay=-.5e-3"])
    path = tmp_path / "run.yaml"
    path.write_text("finetune:\n  weight_decay: -.5e-3\n")
    with pytest.raises(ConfigError, match=f"^{refused}$"):
        load_config(str(path))
    with pytest.raises(ConfigError, match=f"^tune.space\\['finetune.weight_decay'\\]=.*: {refused}$"):
        load_config(None, ["tune.space={finetune.weight_decay: {uniform: [-.5e-3, 1]}}"])


def test_the_lr_as_users_write_it_on_the_command_line_in_a_file_and_in_a_search(tmp_path):
    assert load_config(None, ["finetune.lr=1e-5", "train.lr=5E-4"]).finetune.lr == 1e-5
    path = tmp_path / "run.yaml"
    path.write_text("finetune:\n  lr: 3e-5\ntrain:\n  lr: 5E-4\ntune:\n  space: {finetune.lr: [1e-5, 3e-5]}\n")
    config = load_config(str(path))
    assert (config.finetune.lr, config.train.lr) == (3e-5, 5e-4)
    assert config.tune.space == {"finetune.lr": [1e-5, 3e-5]}
    space = load_config(None, ["tune.space={finetune.lr: {loguniform: [1e-5, 1e-3]}}"]).tune.space
    assert space == {"finetune.lr": {"loguniform": [1e-5, 1e-3]}}


def test_an_int_with_underscores_is_an_int_everywhere(tmp_path):
    assert load_yaml("1_000") == 1000 and isinstance(load_yaml("1_000"), int)
    assert load_config(None, ["tune.num_samples=1_000"]).tune.num_samples == 1000
    path = tmp_path / "run.yaml"
    path.write_text("tune:\n  num_samples: 1_000\n  space: {finetune.epochs: [1_000, 2_000]}\n")
    config = load_config(str(path))
    assert config.tune.num_samples == 1000 and config.tune.space == {"finetune.epochs": [1000, 2000]}
    space = load_config(None, ["tune.space={finetune.batch_size: {randint: [1_000, 2_000]}}"]).tune.space
    assert space == {"finetune.batch_size": {"randint": [1000, 2000]}}


def test_a_float_in_exponent_notation_is_not_an_int():
    with pytest.raises(ConfigError, match=r"^tune.num_samples=100000.0: must be int$"):
        load_config(None, ["tune.num_samples=1E5"])


@pytest.mark.parametrize(
    "override, message",
    [
        ("finetune.lr=1e", "finetune.lr='1e': must be float"),
        ("finetune.lr=e5", "finetune.lr='e5': must be float"),
        ("finetune.lr=1,000", "finetune.lr='1,000': must be float"),
        ("finetune.lr=1e-5x", "finetune.lr='1e-5x': must be float"),
        ("tune.num_samples=_1", "tune.num_samples='_1': must be int"),
        ("finetune.lr=1e999", "finetune.lr=inf: must be a finite number"),
        ("finetune.lr=-1E999", "finetune.lr=-inf: must be a finite number"),
    ],
)
def test_what_is_not_a_finite_number_is_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert str(e.value) == message


def test_a_tune_range_bound_that_is_not_a_number_is_named_as_such():
    with pytest.raises(ConfigError) as e:
        load_config(None, ["tune.space={finetune.lr: {loguniform: [1e-5, 1e-3x]}}"])
    assert "must be two numbers" in str(e.value) and "'1e-3x'" in str(e.value)
    with pytest.raises(ConfigError, match="lo < hi"):
        load_config(None, ["tune.space={finetune.lr: {loguniform: [1e-3, 1e-5]}}"])


def test_text_that_reads_as_a_number_round_trips_through_the_written_config(tmp_path):
    """A quoted `'1e5'` stays text; the resolved config.yaml writes it quoted so it reads back as text."""
    config = load_config(None, ["run_dir='1e5'", "predict.model='.5'", "finetune.lr=1e-5"])
    assert config.run_dir == "1e5" and config.predict.model == ".5"
    path = tmp_path / "config.yaml"
    path.write_text(dump_yaml(config))
    assert load_config(str(path)) == config
    assert load_config(str(path)) != Config()
