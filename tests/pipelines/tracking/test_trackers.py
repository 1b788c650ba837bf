"""The tracking layer on its own (pipelines/tracking): one warning per failing backend while the others
go on, TensorBoard files read back with TensorBoard's own reader (a resume's purge included, on s3://
too), W&B in offline mode without a network, and the tracking keys as settings of no fingerprint."""

import glob
import json
import logging
import os
import struct
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.errors import ConfigError
from pipelines.rundir.registry import STAGES, result_values
from pipelines.stages import stage_tracking
from pipelines.storage import filesystem
from pipelines.tracking import Guarded, Switch, Trackers, flat_params, pretrain_scalars
from pipelines.tracking.tensorboard_files import TensorBoardTracker
from pipelines.tracking.wandb_runs import WandbTracker

from .reading import tensorboard_scalars


class Recording:
    """A tracker that keeps what it was given."""

    def __init__(self):
        self.metrics, self.closed = [], None

    def log_params(self, params):
        pass

    def log_metrics(self, metrics, step):
        self.metrics.append((step, dict(metrics)))

    def log_artifacts(self, folder, path):
        pass

    def close(self, failed=False):
        self.closed = failed


class Failing(Recording):
    """A backend whose server went away: every log call raises."""

    def log_metrics(self, metrics, step):
        super().log_metrics(metrics, step)
        raise ConnectionError("connection refused")


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "tracking:" in r.getMessage()]


def test_a_failing_backend_warns_once_and_the_others_go_on(caplog):
    failing, recording = Failing(), Recording()
    mlflow = Switch("MLflow")
    trackers = Trackers([Guarded(mlflow, lambda: failing), Guarded(Switch("TensorBoard"), lambda: recording)])
    for step in (1, 2, 3):
        trackers.log_metrics({"train/loss": 1.0 / step}, step)
    trackers.close()
    assert len(failing.metrics) == 1 and failing.closed is None  # never called again, not even close()
    assert [step for step, _ in recording.metrics] == [1, 2, 3] and recording.closed is False
    assert warnings_of(caplog) == [
        "tracking: MLflow failed (ConnectionError: connection refused); training goes on without it"
    ]
    # a later run of the same backend in this process (the next trial) is not even opened
    opened = []
    Guarded(mlflow, lambda: opened.append(1) or Recording())
    assert opened == [] and len(warnings_of(caplog)) == 1


def test_opening_that_fails_is_the_one_warning(caplog):
    def unreachable():
        raise OSError("no route to host")

    guarded = Guarded(Switch("W&B"), unreachable)
    guarded.log_metrics({"a": 1.0}, 1)
    guarded.close()
    assert warnings_of(caplog) == ["tracking: W&B failed (OSError: no route to host); training goes on without it"]


def test_metrics_lines_and_params_as_trackers_take_them():
    assert pretrain_scalars({"step": 3, "lr": 0.1, "mfu": None, "mlm_loss": 2, "flag": True}) == {
        "train/lr": 0.1,
        "train/mlm_loss": 2.0,
    }
    assert pretrain_scalars({"step": 4, "split": "validation", "final": True, "mlm_accuracy": 0.5}) == {
        "validation/mlm_accuracy": 0.5
    }
    assert pretrain_scalars({"step": 0, "event": "started", "max_steps": 4, "num_workers": 1}) == {}
    assert flat_params({"train": {"lr": 0.1, "health": {"enabled": True}}, "corpus": {"paths": ["a"]}}) == {
        "train.lr": 0.1,
        "train.health.enabled": True,
        "corpus.paths": ["a"],
    }


def test_tensorboard_files_read_back_and_a_resume_hides_the_redone_steps(tmp_path):
    folder = tmp_path / "tensorboard"
    first = TensorBoardTracker(str(folder))
    first.log_params({"train.lr": 0.01})
    for step in (1, 2, 3):
        first.log_metrics({"train/loss": 1.0 / step}, step)
    first.close()
    # resumed from the step-2 checkpoint: step 3 is trained again and logged again
    resumed = TensorBoardTracker(str(folder), purge_step=3)
    for step in (3, 4):
        resumed.log_metrics({"train/loss": 10.0 * step}, step)
    resumed.close()
    assert tensorboard_scalars(folder, "train/loss") == [(1, 1.0), (2, 0.5), (3, 30.0), (4, 40.0)]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    assert "| train.lr | 0.01 |" in events.Tensors("params/text_summary")[0].tensor_proto.string_val[0].decode()


def test_tensorboard_on_s3_is_uploaded_as_it_is_written_at_most_once_a_minute(s3_endpoint, tmp_path):
    fs, _ = filesystem("s3://tracking-tb/x")
    fs.mkdir("tracking-tb")
    tracker = TensorBoardTracker("s3://tracking-tb/run/pretrain/tensorboard")
    tracker.log_metrics({"validation/mlm_accuracy": 0.25}, 2)
    (live,) = fs.find("tracking-tb/run/pretrain/tensorboard")  # before the end: live
    uploaded = fs.info(live)["size"]
    tracker.log_metrics({"validation/mlm_accuracy": 0.5}, 4)  # within the minute: not uploaded again
    assert fs.info(live)["size"] == uploaded < os.path.getsize(Path(tracker.local, Path(live).name))
    tracker.close()
    fs.get("tracking-tb/run/pretrain/tensorboard/", str(tmp_path) + "/", recursive=True)
    assert tensorboard_scalars(tmp_path, "validation/mlm_accuracy") == [(2, 0.25), (4, 0.5)]


def wandb_records(path):
    """The records of an offline W&B run file: W&B's own protobuf records, in leveldb's log format
    (32 KiB blocks of chunks: crc32, length, type 1 full / 2 first / 3 middle / 4 last) after a
    7-byte header."""
    from wandb.proto import wandb_internal_pb2

    data, pos, chunk, found = Path(path).read_bytes(), 7, b"", []
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk, pos = chunk + data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            found.append(record)
            chunk = b""
    return found


def test_wandb_offline_needs_no_network(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    tracker = WandbTracker("albert-ray-test", "offline", "pretrain", run_id="offline0run", params={"train.lr": 0.01})
    for step in (1, 2):
        tracker.log_metrics({"train/mlm_loss": 3.0 / step}, step)
    tracker.close()
    (path,) = glob.glob(str(tmp_path / "wandb" / "offline-run-*-offline0run" / "run-offline0run.wandb"))
    records = wandb_records(path)
    run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
    assert (run.run_id, run.display_name, run.project) == ("offline0run", "pretrain", "albert-ray-test")
    assert json.loads(next(i.value_json for i in run.config.update if i.key == "train.lr")) == 0.01
    history = [
        {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
        for r in records
        if r.WhichOneof("record_type") == "history"
    ]
    assert [(h["_step"], h["train/mlm_loss"]) for h in history] == [(1, 3.0), (2, 1.5)]


def test_wandb_without_its_package_is_an_error_naming_the_key(tmp_path, monkeypatch):
    monkeypatch.setattr(stage_tracking, "wandb_installed", lambda: False)
    config = load_config(overrides=[f"run_dir={tmp_path}/run", "tracking.wandb=true"])
    with pytest.raises(ConfigError, match=r"^tracking.wandb=true needs the wandb package, an optional extra"):
        stage_tracking.start_tracking(config, "pretrain", "pretrain", {}, str(tmp_path / "out"))


def test_tracking_keys_are_settings_of_no_stage(tmp_path):
    plain = load_config(overrides=[f"run_dir={tmp_path}"])
    tracked = load_config(
        overrides=[
            f"run_dir={tmp_path}",
            "tracking.tensorboard=true",
            "tracking.mlflow_uri=http://127.0.0.1:5000",
            "tracking.mlflow_experiment=x",
            "tracking.wandb=true",
            "tracking.wandb_project=p",
            "tracking.wandb_mode=offline",
        ]
    )
    for name, stage in STAGES.items():
        assert result_values(tracked, stage.config_keys) == result_values(plain, stage.config_keys), name
    with pytest.raises(ConfigError, match=r"^tracking.wandb_mode='sync': must be one of online, offline or null$"):
        load_config(overrides=["tracking.wandb_mode=sync"])
    with pytest.raises(ConfigError, match=r"^tracking.mlflow_uri=' ': must not be empty or blank \(use null\)$"):
        load_config(overrides=["tracking.mlflow_uri=' '"])


def test_mlflow_gives_up_after_a_few_retries_unless_told_otherwise(monkeypatch):
    """MLflow's own defaults (7 retries with backoff, 120 s per request) would hold a run ~4 minutes
    on an unreachable server: the client albert-ray makes sets 3 and 30 s, and keeps a user's values."""
    import os

    from pipelines.tracking.mlflow_runs import mlflow_client

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "x")  # so that the end of the test restores it
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    mlflow_client("http://127.0.0.1:9")
    from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT

    assert MLFLOW_HTTP_REQUEST_MAX_RETRIES.get() == 3 and os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "3"
    assert MLFLOW_HTTP_REQUEST_TIMEOUT.get() == 5  # the environment's own value stays
