"""What a training process opens its trackers from (a TrackingPlan, made by the driver and handed to Ray
workers as it is), the opening itself, and pretraining's metrics lines as the trackers' metrics."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config.tracking import TrackingSection, run_name
from .base import Guarded, Switch, Trackers, scalars
from .mlflow_runs import MlflowTracker
from .tensorboard_files import TensorBoardTracker
from .wandb_runs import WandbTracker

TENSORBOARD, MLFLOW, WANDB = "TensorBoard", "MLflow", "W&B"


def new_switches() -> dict[str, Switch]:
    """One switch per backend: a process (or a search's callback) shares them across its runs, so a
    backend that fails is warned about once and then left alone."""
    return {name: Switch(name) for name in (TENSORBOARD, MLFLOW, WANDB)}


def experiment_name(section: TrackingSection, run_dir: str) -> str:
    return section.mlflow_experiment or run_name(run_dir)


def wandb_project(section: TrackingSection, run_dir: str) -> str:
    return section.wandb_project or run_name(run_dir)


@dataclass(frozen=True)
class TrackingPlan:
    """One tracked run, as the process that logs its metrics opens it."""

    section: TrackingSection
    name: str
    """The run's name in MLflow and W&B."""
    tensorboard_dir: str | None = None
    """Where its event files go (local or s3://); None: no TensorBoard."""
    mlflow_run_id: str | None = None
    """The MLflow run it logs to; None: no MLflow (off, or starting the run failed)."""
    mlflow_owned: bool = False
    """Closing ends the MLflow run (else the driver that started it ends it)."""
    wandb_project: str | None = None
    wandb_run_id: str | None = None
    """The W&B run to resume when it exists (None: a new one)."""
    wandb_group: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    """What TensorBoard (a text table) and W&B (its config) record as the run's params; MLflow's are logged
    by whoever starts its run."""


def open_trackers(
    plan: TrackingPlan, switches: dict[str, Switch] | None = None, purge_step: int | None = None
) -> Trackers:
    """The plan's trackers, each behind its backend's switch (new ones unless given). `purge_step`: a
    resumed run's first step, from which TensorBoard hides what an earlier attempt wrote."""
    switches = switches or new_switches()
    found = []
    if plan.tensorboard_dir is not None:
        found.append(Guarded(switches[TENSORBOARD], lambda: TensorBoardTracker(plan.tensorboard_dir, purge_step)))
        if plan.params:
            found[-1].log_params(plan.params)
    if plan.mlflow_run_id is not None and plan.section.mlflow_uri is not None:
        uri, run_id = plan.section.mlflow_uri, plan.mlflow_run_id
        found.append(Guarded(switches[MLFLOW], lambda: MlflowTracker(uri, run_id, plan.mlflow_owned)))
    if plan.section.wandb:
        found.append(
            Guarded(
                switches[WANDB],
                lambda: WandbTracker(
                    plan.wandb_project or plan.name,
                    plan.section.wandb_mode,
                    plan.name,
                    plan.wandb_group,
                    plan.wandb_run_id,
                    plan.params,
                ),
            )
        )
    return Trackers(found)


def pretrain_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """A metrics.jsonl line as trackers' metrics: a training line's numbers under train/, a validation
    pass's under validation/; events (start, resume, training health's) are not plotted."""
    if "event" in record:
        return {}
    split = record.get("split", "train")
    return scalars(record, f"{split}/", skip=("step", "split", "final"))


__all__ = ["TrackingPlan", "experiment_name", "new_switches", "open_trackers", "pretrain_scalars", "wandb_project"]
