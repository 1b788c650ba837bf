"""What the trackers recorded, read back with their own readers: TensorBoard's event accumulator and
MLflow's client (shared by the stage tests that run with tracking on)."""

import tempfile
from pathlib import Path


def tensorboard_scalars(folder, tag: str) -> list[tuple[int, float]]:
    """(step, value) of a scalar, as TensorBoard shows it (a resumed run's purged events left out)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def mlflow_runs(url: str, experiment: str) -> dict[str, object]:
    """The experiment's runs by name."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    found = client.get_experiment_by_name(experiment)
    return {run.info.run_name: run for run in client.search_runs([found.experiment_id])}


def mlflow_history(url: str, run_id: str, key: str) -> dict[int, float]:
    """step -> value of a metric; a step logged twice (redone after a resume) counts with its last value."""
    from mlflow.tracking import MlflowClient

    history = sorted(MlflowClient(url).get_metric_history(run_id, key), key=lambda m: m.timestamp)
    return {m.step: m.value for m in history}


def mlflow_artifact(url: str, run_id: str, path: str) -> bytes:
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as local:
        return Path(MlflowClient(url).download_artifacts(run_id, path, local)).read_bytes()


def mlflow_artifact_names(url: str, run_id: str, path: str) -> list[str]:
    from mlflow.tracking import MlflowClient

    return sorted(Path(a.path).name for a in MlflowClient(url).list_artifacts(run_id, path))
