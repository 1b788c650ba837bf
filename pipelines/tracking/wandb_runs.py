"""Weights & Biases runs: an optional extra (`pip install wandb`), imported only when tracking.wandb is on."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

MISSING = "tracking.wandb=true needs the wandb package, an optional extra: pip install wandb (or set it false)"


def wandb_installed() -> bool:
    return importlib.util.find_spec("wandb") is not None


class WandbTracker:
    """One W&B run; several may be open in one process (concurrent trials). A `run_id` given is resumed
    when it exists (a resumed pretraining), else made. W&B keeps no artifacts of ours."""

    open_runs = 0
    """This process's W&B runs not closed yet."""

    def __init__(
        self,
        project: str,
        mode: str | None,
        name: str,
        group: str | None = None,
        run_id: str | None = None,
        params: Mapping[str, Any] | None = None,
    ):
        if not wandb_installed():
            raise ImportError(MISSING)
        import wandb

        # console off: W&B would otherwise wrap this process's stdout; stats off: no system-metrics thread
        settings = wandb.Settings(console="off", x_disable_stats=True, silent=True)
        self.run = wandb.init(
            project=project,
            name=name,
            group=group,
            id=run_id,
            resume="allow" if run_id else None,
            mode=mode,
            config=dict(params or {}),
            allow_val_change=True,  # a resumed run's settings may differ (train.num_workers)
            reinit="create_new",
            settings=settings,
        )
        WandbTracker.open_runs += 1

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.run.config.update(dict(params), allow_val_change=True)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.run.log(dict(metrics), step=step)

    def log_artifacts(self, folder: str, path: str) -> None:
        """Artifacts go to MLflow only."""

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)
        WandbTracker.open_runs -= 1
        if WandbTracker.open_runs == 0:  # finish() can return before W&B's service has written the run
            import wandb

            wandb.teardown()


__all__ = ["MISSING", "WandbTracker", "wandb_installed"]
