"""Experiment tracking, free of Ray: one interface (params, metrics by step, artifacts, close) over
TensorBoard, MLflow and W&B, each behind a guard that turns its failure into one warning."""

from .base import Guarded, Switch, Tracker, Trackers, flat_params, scalars
from .plan import TrackingPlan, experiment_name, new_switches, open_trackers, pretrain_scalars, wandb_project

__all__ = [
    "Guarded",
    "Switch",
    "Tracker",
    "TrackingPlan",
    "Trackers",
    "experiment_name",
    "flat_params",
    "new_switches",
    "open_trackers",
    "pretrain_scalars",
    "scalars",
    "wandb_project",
]
