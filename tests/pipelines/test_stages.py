"""Stage fingerprints: which config changes make which stages out of date."""

import json
import os

import pytest

from pipelines.config import load_config
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint


def commit(config, name):
    """Write the manifest a completed stage leaves."""
    folder = config.run_dir + "/" + name
    os.makedirs(folder, exist_ok=True)
    with open(folder + "/manifest.json", "w") as f:
        json.dump({"fingerprint": stage_fingerprint(config, name)}, f)


def test_a_change_reruns_its_stage_and_those_after_it(tmp_path):
    config = load_config(overrides=[f"run_dir={tmp_path}"])
    for name in ("vocab", "data", "pretrain"):
        assert not is_up_to_date(config, name)
        commit(config, name)
        assert is_up_to_date(config, name)

    lr = load_config(overrides=[f"run_dir={tmp_path}", "train.lr=0.001"])
    assert [is_up_to_date(lr, n) for n in ("vocab", "data", "pretrain")] == [True, True, False]
    masking = load_config(overrides=[f"run_dir={tmp_path}", "data.masked_lm_prob=0.2"])
    assert [is_up_to_date(masking, n) for n in ("vocab", "data", "pretrain")] == [True, False, True]
    # pretrain is stale once data is rebuilt with the new settings: its input fingerprint changed
    commit(masking, "data")
    assert not is_up_to_date(masking, "pretrain")
    seed = load_config(overrides=[f"run_dir={tmp_path}", "data.seed=1"])
    assert not is_up_to_date(seed, "vocab")  # the sentence sample depends on data.seed


def test_fingerprint_ignores_where_the_run_lives(tmp_path):
    a = load_config(overrides=[f"run_dir={tmp_path}/a"])
    b = load_config(overrides=["run_dir=s3://bucket/b"])
    assert stage_fingerprint(a, "vocab") == stage_fingerprint(b, "vocab")
    assert stage_fingerprint(a, "data", {"vocab": "x"}) == stage_fingerprint(b, "data", {"vocab": "x"})
    assert stage_fingerprint(a, "data", {"vocab": "x"}) != stage_fingerprint(a, "data", {"vocab": "y"})


def test_missing_input_names_the_stage_to_run(tmp_path):
    config = load_config(overrides=[f"run_dir={tmp_path}"])
    with pytest.raises(FileNotFoundError, match="run the vocab stage first"):
        stage_fingerprint(config, "data")
