"""A fine-tuning search's tracking: each trial a run of its own (a child of the search's MLflow run), with
its hyperparameters as params and its epochs as steps. Opened by the search's driver, as trials report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..config.tracking import TrackingSection
from ..storage import join
from .base import Switch, Trackers
from .mlflow_runs import PARENT_TAG, MlflowTracker, find_run, start_run
from .plan import MLFLOW, TrackingPlan, open_trackers

TRIAL_TAG = "albert_ray.trial_id"


@dataclass(frozen=True)
class SearchTracking:
    """What a search's driver opens each trial's trackers from."""

    section: TrackingSection
    experiment: str
    """The MLflow experiment."""
    tensorboard_dir: str | None
    """Each trial's event files go to <this>/<trial_id>/ (local or s3://); None: no TensorBoard."""
    mlflow_parent: str | None
    """The search's MLflow run, every trial's parent; None: no MLflow."""
    wandb_project: str
    wandb_group: str
    """The W&B group of the search's trial runs."""


def open_trial(
    search: SearchTracking, trial_id: str, params: Mapping[str, Any], switches: dict[str, Switch], restored: bool
) -> Trackers:
    """A trial's trackers. `restored`: the search was restored from an interrupted one, so the trial may
    have an MLflow run already (found by its tags), and its W&B run (id = trial id) is resumed."""
    mlflow_run = None
    if search.mlflow_parent is not None and search.section.mlflow_uri is not None:
        uri, tags = search.section.mlflow_uri, {TRIAL_TAG: trial_id, PARENT_TAG: search.mlflow_parent}
        if restored:
            mlflow_run = switches[MLFLOW].call(find_run, uri, search.experiment, tags)
        if mlflow_run is None:
            mlflow_run = switches[MLFLOW].call(
                start_run, uri, search.experiment, f"trial {trial_id}", {TRIAL_TAG: trial_id}, search.mlflow_parent
            )
            if mlflow_run is not None:
                switches[MLFLOW].call(lambda: MlflowTracker(uri, mlflow_run).log_params(params))
    plan = TrackingPlan(
        section=search.section,
        name=f"trial {trial_id}",
        tensorboard_dir=join(search.tensorboard_dir, trial_id) if search.tensorboard_dir else None,
        mlflow_run_id=mlflow_run,
        mlflow_owned=True,
        wandb_project=search.wandb_project,
        wandb_run_id=trial_id,
        wandb_group=search.wandb_group,
        params=dict(params),
    )
    return open_trackers(plan, switches)


__all__ = ["TRIAL_TAG", "SearchTracking", "open_trial"]
