"""MLflow runs through MLflow's own client (no global active run, so concurrent trials in one process
each log to their own run): experiments made on first use, runs made, found again or attached to."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

PARENT_TAG = "mlflow.parentRunId"
MAX_PARAMS, MAX_METRICS, MAX_VALUE = 100, 1000, 6000  # MLflow's limits per log_batch call and per param value


# MLflow's own defaults retry a failing request 7 times with a backoff factor of 2 (about 4 minutes
# of waiting before a run learns that its server is gone) and wait 120 s for an answer. A tracking
# failure must not hold training that long: 3 retries (~14 s of backoff) and 30 s per request,
# unless the environment says otherwise (docs/tracking.md).
REQUEST_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


def mlflow_client(uri: str):
    import os

    from mlflow.tracking import MlflowClient

    for name, value in REQUEST_DEFAULTS.items():
        os.environ.setdefault(name, value)
    return MlflowClient(tracking_uri=uri)


def experiment_id(client, name: str) -> str:
    """The experiment's id, made when missing (by whichever process asks first)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    from mlflow.exceptions import MlflowException

    try:
        return client.create_experiment(name)
    except MlflowException:  # another process made it meanwhile
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def start_run(uri: str, experiment: str, name: str, tags: Mapping[str, str], parent: str | None = None) -> str:
    """A new run (a child of `parent` when given); returns its id."""
    client = mlflow_client(uri)
    tags = {**tags, **({PARENT_TAG: parent} if parent else {})}
    return client.create_run(experiment_id(client, experiment), run_name=name, tags=tags).info.run_id


def find_run(uri: str, experiment: str, tags: Mapping[str, str]) -> str | None:
    """The newest run carrying all of `tags` (a resumed trial's), None when there is none."""
    client = mlflow_client(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    where = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = client.search_runs([found.experiment_id], where, order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def reopen_run(uri: str, run_id: str) -> str:
    """An earlier run (a resumed or continued pretraining's) marked running again; returns its id."""
    mlflow_client(uri).update_run(run_id, status="RUNNING")
    return run_id


class MlflowTracker:
    """One MLflow run. `owns`: close() ends it (the process that started it), else it only stops logging."""

    def __init__(self, uri: str, run_id: str, owns: bool = True):
        self.client, self.run_id, self.owns = mlflow_client(uri), run_id, owns

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(key, str(value)[:MAX_VALUE]) for key, value in sorted(params.items())]
        for i in range(0, len(items), MAX_PARAMS):
            self.client.log_batch(self.run_id, params=items[i : i + MAX_PARAMS])

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(key, value, now, step) for key, value in metrics.items()]
        for i in range(0, len(items), MAX_METRICS):
            self.client.log_batch(self.run_id, metrics=items[i : i + MAX_METRICS])

    def log_artifacts(self, folder: str, path: str) -> None:
        self.client.log_artifacts(self.run_id, folder, path)

    def close(self, failed: bool = False) -> None:
        if self.owns:
            self.client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")


__all__ = ["MlflowTracker", "experiment_id", "find_run", "mlflow_client", "reopen_run", "start_run"]
