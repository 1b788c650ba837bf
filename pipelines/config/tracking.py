"""The `tracking` section: experiment tracking of pretraining and fine-tuning (TensorBoard, MLflow,
W&B), all off by default. Every key is a setting: tracking never changes a result."""

from __future__ import annotations

import posixpath
from dataclasses import field
from typing import ClassVar

from pydantic.dataclasses import dataclass

from .base import STRICT, Section, setting

WANDB_MODES = ("online", "offline")
TRACKING = "experiment tracking"


@dataclass(config=STRICT)
class TrackingSection(Section):
    """Experiment tracking (docs/tracking.md); a tracker that fails warns once and training goes on without it."""

    SECTION: ClassVar[str] = "tracking"

    tensorboard: bool = field(default=False, metadata=setting(TRACKING))
    """TensorBoard event files in {run_dir}/pretrain/tensorboard/ and {run_dir}/finetune/tensorboard/<trial_id>/."""
    mlflow_uri: str | None = field(default=None, metadata=setting(TRACKING))
    """An MLflow tracking server (http://host:port): runs for pretraining, each fine-tuning search and its
    trials, and the report, with params, metrics and the models and report.md as artifacts; null: off."""
    mlflow_experiment: str | None = field(default=None, metadata=setting(TRACKING))
    """The MLflow experiment of the runs (made when missing); null: the run_dir's last folder name."""
    wandb: bool = field(default=False, metadata=setting(TRACKING))
    """Weights & Biases runs with the params and metrics MLflow gets (no artifacts); an optional extra:
    `pip install wandb`."""
    wandb_project: str | None = field(default=None, metadata=setting(TRACKING))
    """The W&B project; null: the run_dir's last folder name."""
    wandb_mode: str | None = field(default=None, metadata=setting(TRACKING))
    """online, or offline (files under WANDB_DIR for a later `wandb sync`; no network needed); null: W&B's own
    default (WANDB_MODE, else online)."""

    def __post_init__(self) -> None:
        for name in ("mlflow_uri", "mlflow_experiment", "wandb_project"):
            value = getattr(self, name)
            self.require(name, value is None or bool(value.strip()), "must not be empty or blank (use null)")
        modes = ", ".join(WANDB_MODES)
        self.require("wandb_mode", self.wandb_mode in (None, *WANDB_MODES), f"must be one of {modes} or null")

    @property
    def enabled(self) -> bool:
        """Whether any tracker is on."""
        return self.tensorboard or self.mlflow_uri is not None or self.wandb


def run_name(run_dir: str) -> str:
    """The run_dir's last folder name: the default MLflow experiment and W&B project."""
    return posixpath.basename(run_dir.rstrip("/")) or "albert-ray"


__all__ = ["TrackingSection", "WANDB_MODES", "run_name"]
