"""Config YAML as it is read (pipelines/config/bounded_yaml.py): alias bombs, recursive aliases, deep
nesting, duplicate keys, files that are not UTF-8 or too large are refused in one short line naming
the file or the override (issue #27); anchors, aliases and merge keys within bounds still work."""

import re
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.config.bounded_yaml import MAX_ALIASES, MAX_CONFIG_BYTES, MAX_DEPTH, MAX_VALUES, load_yaml
from pipelines.errors import ConfigError


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    """A flow mapping whose last entry holds width**levels "lol"s, written in a few hundred characters."""
    entries = ["l0: &l0 [lol]"] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "{" + ", ".join(entries) + "}"


def refusal(path, text: str | bytes) -> str:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as e:
        load_config(str(path))
    message = str(e.value)
    assert message.startswith(f"config file '{path}'") and len(message) < 300, message
    return message


def test_alias_bombs_recursive_aliases_and_deep_nesting_are_refused(tmp_path):
    path = tmp_path / "bomb.yaml"
    assert f"values (at most {MAX_VALUES}); write the values out" in refusal(
        path, f"tune:\n  space: {billion_laughs()}\n"
    )
    doubling = ["tune:", "  space:", "    d0: &d0 [x]"] + [
        f"    d{i}: &d{i} [*d{i - 1}, *d{i - 1}]" for i in range(1, 40)
    ]
    assert "its YAML aliases expand to" in refusal(path, "\n".join(doubling))
    many = "tune:\n  space: {a: &a 1, b: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]}\n"
    assert f"more than {MAX_ALIASES} YAML aliases (line 2)" in refusal(path, many)
    assert "a YAML alias refers to a node that contains it (line 2)" in refusal(path, "tune:\n  space: &s {a: *s}\n")
    assert f"nested more than {MAX_DEPTH} levels deep" in refusal(path, "tune:\n  space: " + "[" * 3000 + "]" * 3000)
    with pytest.raises(ConfigError, match=r"^override 'tune.space=\{l0: .*\.\.\. \(\d+ characters\): its YAML aliases"):
        load_config(None, [f"tune.space={billion_laughs()}"])


def test_aliases_and_merge_keys_within_bounds_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("tune:\n  space: &s {finetune.lr: [0.001, 0.002]}\n  resources_per_trial: {<<: {CPU: 1}, GPU: 1}\n")
    config = load_config(str(path))
    assert config.tune.space == {"finetune.lr": [0.001, 0.002]} and config.tune.resources_per_trial == {
        "CPU": 1,
        "GPU": 1,
    }
    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, x: 3}\n") == {"a": {"x": 1, "y": 2}, "b": {"x": 3, "y": 2}}


def test_a_key_written_twice_names_the_file_the_key_and_the_lines(tmp_path):
    path = tmp_path / "dup.yaml"
    assert "key 'seed' appears twice in one mapping (line 2 and line 4)" in refusal(
        path, "data:\n  seed: 1\n  ngram: 2\n  seed: 3\n"
    )
    assert "key 'data' appears twice in one mapping (line 1 and line 3)" in refusal(
        path, "data: {seed: 1}\nvocab: {size: 100}\ndata: {seed: 2}\n"
    )
    with pytest.raises(ConfigError, match="override .*: key 'finetune.lr' appears twice"):
        load_config(None, ["tune.space={finetune.lr: 0.001, finetune.lr: 0.002}"])


def test_a_file_that_is_not_utf8_or_is_too_large_is_one_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    assert "is not UTF-8 text (line 3, byte 21: invalid" in refusal(path, b"data:\n  seed: 1\n# caf\xe9 au lait\n")
    path.write_bytes(b"\xef\xbb\xbfdata:\n  seed: 5\n")  # a byte order mark is fine
    assert load_config(str(path)).data.seed == 5
    big = "data:\n  seed: 1\n" + "#" * MAX_CONFIG_BYTES + "\n"
    assert f"is larger than {MAX_CONFIG_BYTES} bytes" in refusal(tmp_path / "big.yaml", big)


def test_a_long_value_is_cut_short_in_the_error():
    values = ", ".join(["1.0e-3"] * 3000)
    with pytest.raises(ConfigError) as e:
        load_config(None, [f"tune.space={{finetune.lr: [{values}, -1.0]}}"])
    assert re.fullmatch(
        r"tune.space\['finetune.lr'\]=\[0.001, .*\.\.\. \(\d+ characters\): finetune.lr=-1.0: must be > 0", str(e.value)
    )
    assert len(str(e.value)) < 400


def test_a_config_builds_on_its_base(tmp_path):
    """`base:` names a config file (relative to the one naming it) whose sections come first: each
    section merged key by key, a subsection (train.health) too, tune.space replaced whole, as
    command-line overrides merge; a chain of bases; overrides last."""
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "root.yaml").write_text(
        "run_dir: runs/root\nvocab: {size: 900}\ntrain: {lr: 0.01, max_steps: 7, health: {max_rollbacks: 5}}\n"
        "tune: {num_samples: 3, space: {finetune.lr: [0.1, 0.2], finetune.batch_size: 8}}\n"
    )
    (tmp_path / "presets" / "middle.yaml").write_text("base: root.yaml\ntrain: {max_steps: 9}\n")
    (tmp_path / "top.yaml").write_text(
        "base: presets/middle.yaml\nrun_dir: runs/top\ntrain: {health: {max_skipped_in_a_row: 4}}\n"
        "tune: {space: {finetune.lr: [0.3, 0.4]}}\n"
    )
    config = load_config(str(tmp_path / "top.yaml"), ["train.lr=0.02"])
    assert config.run_dir == "runs/top" and config.vocab.size == 900
    assert (config.train.lr, config.train.max_steps) == (0.02, 9)
    assert (config.train.health.max_rollbacks, config.train.health.max_skipped_in_a_row) == (5, 4)
    assert config.tune.num_samples == 3 and config.tune.space == {"finetune.lr": [0.3, 0.4]}
    assert load_config(str(tmp_path / "presets" / "middle.yaml")).run_dir == "runs/root"


@pytest.mark.parametrize(
    "files, message",
    [
        ({"a.yaml": "base: a.yaml\n"}, r"a.yaml: base='a.yaml' builds on itself"),
        (
            {"a.yaml": "base: b.yaml\n", "b.yaml": "base: a.yaml\n"},
            r"b.yaml: base='a.yaml' builds on itself \(\S*/a.yaml -> \S*/b.yaml -> \S*/a.yaml\)$",
        ),
        ({"a.yaml": "base: missing.yaml\n"}, r"a.yaml: base='missing.yaml': \S*/missing.yaml does not exist"),
        ({"a.yaml": "base: [x]\n"}, r"a.yaml: base=\['x'\]: the path of a config file"),
        ({"a.yaml": "base: b.yaml\n", "b.yaml": "trian: {lr: 1}\n"}, r"b.yaml: unknown config key 'trian'"),
    ],
)
def test_a_bad_base_is_one_line_naming_the_file(tmp_path, files, message):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(str(tmp_path / "a.yaml"))


def test_several_config_files_compose_in_order_and_a_typo_gets_the_nearest_key(tmp_path):
    """`--config a.yaml --config b.yaml`: b over a, as a file over its base (the first file was
    silently dropped); an unknown key names the nearest one where one is close."""
    from pipelines.cli.run import build_parser
    from pipelines.config import parse_cli

    (tmp_path / "a.yaml").write_text("run_dir: runs/a\nvocab: {size: 900}\ntrain: {lr: 0.01, max_steps: 7}\n")
    (tmp_path / "b.yaml").write_text("train: {max_steps: 9}\n")
    argv = ["--config", str(tmp_path / "a.yaml"), "--config", str(tmp_path / "b.yaml"), "train.lr=0.02"]
    config, _ = parse_cli(argv, build_parser("albert-ray run"))
    assert (config.run_dir, config.vocab.size, config.train.lr, config.train.max_steps) == ("runs/a", 900, 0.02, 9)
    unknown = "^unknown config key"
    with pytest.raises(ConfigError, match=rf"{unknown} 'data.max_seq_len'; did you mean 'data.max_seq_length'\? "):
        load_config(overrides=["data.max_seq_len=64"])
    with pytest.raises(ConfigError, match=rf"{unknown} 'trian.lr'; did you mean 'train.lr'\? the top level has"):
        load_config(overrides=["trian.lr=1"])
    with pytest.raises(ConfigError, match=r"^unknown config key 'finetune.zzz'; finetune has: "):
        load_config(overrides=["finetune.zzz=1"])


def test_the_qa_demo_builds_on_make_runs_config_and_fine_tunes_its_model():
    root = Path(__file__).resolve().parents[2] / "configs"
    demo, default = load_config(str(root / "qa-demo.yaml")), load_config(str(root / "default.yaml"))
    assert demo.finetune.pretrained == "runs/default/pretrain/hf" and demo.run_dir != default.run_dir
    assert [getattr(demo, s) for s in ("corpus", "vocab", "data", "model", "train")] == [
        getattr(default, s) for s in ("corpus", "vocab", "data", "model", "train")
    ]
