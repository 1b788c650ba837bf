"""The one interface every tracker has (params once, metrics by step, artifact folders, close), the guard
that turns a tracker's first failure into one warning, and the fan-out over the trackers that are on."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class Tracker(Protocol):
    """An experiment tracker's run, as pretraining and fine-tuning use it."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        """The run's settings (flat keys: `train.lr`), once."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Numbers at a step (an optimizer step in pretraining, an epoch in fine-tuning)."""

    def log_artifacts(self, folder: str, path: str) -> None:
        """A local folder's files, as artifacts under `path`."""

    def close(self, failed: bool = False) -> None:
        """The end of the run (`failed`: training raised)."""


class Switch:
    """One backend in this process (MLflow, say): on until its first failure, which is one warning."""

    def __init__(self, name: str):
        self.name, self.on = name, True

    def fail(self, error: Exception) -> None:
        if self.on:
            text = " ".join(str(error).split())[:300]
            log.warning(
                "tracking: %s failed (%s: %s); training goes on without it", self.name, type(error).__name__, text
            )
        self.on = False

    def call(self, function: Callable[..., T], *args: Any) -> T | None:
        """`function(*args)` while the backend is on; None once it has failed (now or before)."""
        if not self.on:
            return None
        try:
            return function(*args)
        except Exception as e:
            self.fail(e)
            return None


class Guarded:
    """A tracker behind its backend's switch: its failure, opening included, turns the backend off with
    one warning, and training goes on (an unreachable server, a full disk, a missing package)."""

    def __init__(self, switch: Switch, open_tracker: Callable[[], Tracker]):
        self.switch = switch
        self.tracker = switch.call(open_tracker)

    def _call(self, method: str, *args: Any) -> None:
        if self.tracker is not None:
            self.switch.call(getattr(self.tracker, method), *args)
            if not self.switch.on:
                self.tracker = None

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._call("log_params", params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        if metrics:
            self._call("log_metrics", metrics, step)

    def log_artifacts(self, folder: str, path: str) -> None:
        self._call("log_artifacts", folder, path)

    def close(self, failed: bool = False) -> None:
        self._call("close", failed)
        self.tracker = None


class Trackers:
    """Every tracker that is on, as one (none: every call does nothing)."""

    def __init__(self, trackers: list[Tracker] | None = None):
        self.trackers = trackers or []

    def log_params(self, params: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log_params(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for tracker in self.trackers:
            tracker.log_metrics(metrics, step)

    def log_artifacts(self, folder: str, path: str) -> None:
        for tracker in self.trackers:
            tracker.log_artifacts(folder, path)

    def close(self, failed: bool = False) -> None:
        for tracker in self.trackers:
            tracker.close(failed)
        self.trackers = []


def scalars(values: Mapping[str, Any], prefix: str = "", skip: tuple[str, ...] = ()) -> dict[str, float]:
    """The numbers among `values` (not bools, not None), keys prefixed: what a tracker plots."""
    return {
        f"{prefix}{k}": float(v)
        for k, v in values.items()
        if k not in skip and isinstance(v, int | float) and not isinstance(v, bool)
    }


def flat_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as flat `section.key` params; lists and other values as they are."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
            flat.update(flat_params(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


__all__ = ["Guarded", "Switch", "Tracker", "Trackers", "flat_params", "scalars"]
