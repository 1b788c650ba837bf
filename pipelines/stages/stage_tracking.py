"""A stage's tracked run (pipelines/tracking; docs/tracking.md): the MLflow run its driver starts, gives
the params and artifacts and ends, and the plan its training processes log metrics from. The runs' ids
are kept in the output's tracking.json, so a resumed or continued pretraining logs to the runs it began."""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..errors import ConfigError
from ..storage import copy_tree, exists, filesystem, is_remote, join, read_bytes, read_json, write_json
from ..tracking import Guarded, Switch, Trackers, TrackingPlan, experiment_name, new_switches, wandb_project
from ..tracking.mlflow_runs import MlflowTracker, reopen_run, start_run
from ..tracking.plan import MLFLOW
from ..tracking.search import SearchTracking
from ..tracking.wandb_runs import MISSING, wandb_installed

TRACKING_IDS = "tracking.json"
"""In a tracked stage's output: {mlflow_uri, mlflow_experiment, mlflow_run_id, wandb_project, wandb_run_id}."""
TENSORBOARD = "tensorboard"


@contextlib.contextmanager
def local_folder(folder: str) -> Iterator[str]:
    """A run_dir folder as a local one: itself, or an s3:// folder's copy while the context lasts."""
    if not is_remote(folder):
        yield folder
        return
    fs, path = filesystem(folder)
    with tempfile.TemporaryDirectory() as local:
        fs.get(path.rstrip("/") + "/", local + "/", recursive=True)
        yield local


@dataclass
class StageTracking:
    """A stage's tracked run: the plan its training processes open their trackers from (None: tracking
    off), and the driver's end of its MLflow run."""

    plan: TrackingPlan | None
    driver: Trackers
    experiment: str = ""
    """The MLflow experiment."""
    switch: Switch = field(default_factory=lambda: Switch(MLFLOW))
    """The driver's MLflow switch: copying a folder out for it fails as MLflow would, with one warning."""

    def __enter__(self) -> StageTracking:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        self.close(failed=error is not None)

    def search(self, group: str) -> SearchTracking | None:
        """A fine-tuning search's tracking under this run: its trials' MLflow runs are this run's children,
        their event files go to its tensorboard/<trial_id>/, their W&B runs form `group`."""
        if self.plan is None:
            return None
        plan = self.plan
        return SearchTracking(
            plan.section, self.experiment, plan.tensorboard_dir, plan.mlflow_run_id, plan.wandb_project or "", group
        )

    def log_folder(self, folder: str, path: str) -> None:
        """A run_dir folder's files as MLflow artifacts under `path`."""
        if self.driver.trackers:
            self.switch.call(self._log_folder, folder, path)

    def log_files(self, files: list[str], path: str) -> None:
        """run_dir files as MLflow artifacts under `path`."""
        if self.driver.trackers:
            self.switch.call(self._log_files, files, path)

    def _log_folder(self, folder: str, path: str) -> None:
        with local_folder(folder) as local:
            self.driver.log_artifacts(local, path)

    def _log_files(self, files: list[str], path: str) -> None:
        with tempfile.TemporaryDirectory() as local:
            for name in files:
                with open(os.path.join(local, os.path.basename(name)), "wb") as f:
                    f.write(read_bytes(name))
            self.driver.log_artifacts(local, path)

    def close(self, failed: bool = False) -> None:
        self.driver.close(failed)


def start_tracking(
    config: Config, stage: str, name: str, params: Mapping[str, Any], out: str, previous: str | None = None
) -> StageTracking:
    """The tracked run `name` of `stage` writing the folder `out`, its ids kept in out/tracking.json.
    `previous`: a folder whose tracking.json names runs to go on with (an unfinished build resumed, the
    complete output a pretraining continues, whose TensorBoard files are copied over): its MLflow run is
    reopened with the params it has, its W&B run resumed. Otherwise new runs, and `params` logged to the
    MLflow run here. Raises ConfigError when tracking.wandb is on without the wandb package."""
    section = config.tracking
    if not section.enabled:
        return StageTracking(None, Trackers())
    if section.wandb and not wandb_installed():
        raise ConfigError(MISSING)
    experiment, project = experiment_name(section, config.run_dir), wandb_project(section, config.run_dir)
    before = (read_json(join(previous, TRACKING_IDS)) if previous else None) or {}
    switch, uri, mlflow_run, reopened = new_switches()[MLFLOW], section.mlflow_uri, None, False
    if uri is not None and (before.get("mlflow_uri"), before.get("mlflow_experiment")) == (uri, experiment):
        mlflow_run = switch.call(reopen_run, uri, before["mlflow_run_id"]) if before.get("mlflow_run_id") else None
        reopened = mlflow_run is not None
    if uri is not None and mlflow_run is None:
        tags = {"albert_ray.run_dir": config.run_dir, "albert_ray.stage": stage}
        mlflow_run = switch.call(start_run, uri, experiment, name, tags)
    wandb_run = before.get("wandb_run_id") if before.get("wandb_project") == project else None
    wandb_run = (wandb_run or uuid.uuid4().hex[:12]) if section.wandb else None
    ids = {"mlflow_uri": uri, "mlflow_experiment": experiment, "mlflow_run_id": mlflow_run}
    if uri is not None or section.wandb:
        write_json(join(out, TRACKING_IDS), {**ids, "wandb_project": project, "wandb_run_id": wandb_run})
    driver = Trackers([Guarded(switch, lambda: MlflowTracker(uri, mlflow_run))] if mlflow_run else [])
    if not reopened:
        driver.log_params(params)
    tensorboard = join(out, TENSORBOARD) if section.tensorboard else None
    carried = tensorboard and previous and previous != out and exists(join(previous, TENSORBOARD))
    if carried and not exists(tensorboard):  # a continuation's curves span both outputs, as its metrics do
        copy_tree(join(previous, TENSORBOARD), tensorboard)
    plan = TrackingPlan(section, name, tensorboard, mlflow_run, False, project, wandb_run, None, dict(params))
    return StageTracking(plan, driver, experiment, switch)


__all__ = ["TENSORBOARD", "TRACKING_IDS", "StageTracking", "local_folder", "start_tracking"]
