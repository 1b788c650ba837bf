"""The journal a fine-tuning search resumes from, free of Ray: each trial's hyperparameters, the
metrics and checkpoint of every epoch it reported, and how it ended. The search's driver writes it
as JSON as its trials report (pipelines/stages/tune_search.py); an interrupted search is resumed
from it alone, so nothing Ray Tune pickled into the run_dir is read back. What it holds is checked
when it is read: a BadInput names the file."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadInput

VERSION = 1
TRIAL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
"""A trial's id names its trackers' runs and folders: no path separators, no dots."""


@dataclass
class TrialRecord:
    """One trial of the search, across the attempts that ran it."""

    config: dict[str, Any]
    """Its `finetune.KEY` values."""
    epochs: list[dict[str, Any]] = field(default_factory=list)
    """Each epoch it reported, in order: {"metrics": {name: number}, "checkpoint": the epoch's
    checkpoint as a path relative to the search's storage, or None}."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Training seconds of each Ray Tune trial that ran it: a continued trial has two or more."""
    ended: bool = False
    """Completed, stopped by the scheduler, or failed: not run again."""
    error: str = ""

    def report(self, run: str, metrics: dict[str, float], seconds: float, checkpoint: str | None) -> None:
        self.epochs.append({"metrics": metrics, "checkpoint": checkpoint})
        self.seconds[run] = seconds

    def checkpointed(self, checkpoint: str) -> None:
        """The last reported epoch's checkpoint, which Ray Tune saves after the epoch's report."""
        if self.epochs:
            self.epochs[-1]["checkpoint"] = checkpoint

    def end(self, error: str = "") -> None:
        self.ended, self.error = True, error

    def continue_from(self, exists: Callable[[str], bool]) -> str | None:
        """The checkpoint a continued trial resumes from: its last epoch whose checkpoint still
        exists, or None (it starts over). The epochs after it are dropped: the trial trains them
        again."""
        kept = [i for i, e in enumerate(self.epochs) if e["checkpoint"] is not None and exists(e["checkpoint"])]
        self.epochs = self.epochs[: kept[-1] + 1] if kept else []
        return self.epochs[-1]["checkpoint"] if kept else None


@dataclass
class SearchJournal:
    trials: dict[str, TrialRecord] = field(default_factory=dict)
    """By trial id: the Ray Tune id of the trial that first ran it."""
    attempts: int = 1
    """How many runs have worked on the search (the first, then each resume)."""

    def to_json(self) -> dict[str, Any]:
        trials = {
            trial_id: {"config": r.config, "epochs": r.epochs, "seconds": r.seconds, "ended": r.ended, "error": r.error}
            for trial_id, r in self.trials.items()
        }
        return {"version": VERSION, "attempts": self.attempts, "trials": trials}

    def unfinished(self) -> dict[str, TrialRecord]:
        return {trial_id: r for trial_id, r in self.trials.items() if not r.ended}

    def scored(self, metric: str) -> list[tuple[dict[str, Any], float]]:
        """(config, the metric at its last epoch) of each trial that ended without an error: what a
        searcher was told of it when it ended."""
        return [
            (r.config, r.epochs[-1]["metrics"][metric])
            for r in self.trials.values()
            if r.ended and not r.error and r.epochs and metric in r.epochs[-1]["metrics"]
        ]

    def remaining(self, planned: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The planned configs no trial has run yet, in order: a config run twice in the plan
        counts twice."""
        left = list(planned)
        for record in self.trials.values():
            if record.config in left:
                left.remove(record.config)
        return left


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_record(value: Any, is_point: Callable[[dict[str, Any]], bool]) -> TrialRecord:
    if not isinstance(value, dict) or set(value) != {"config", "epochs", "seconds", "ended", "error"}:
        raise ValueError("a trial is {config, epochs, seconds, ended, error}")
    config, epochs, seconds = value["config"], value["epochs"], value["seconds"]
    if not isinstance(config, dict) or not is_point(config):
        raise ValueError(f"config {config!r} is not a point of tune.space")
    if not isinstance(epochs, list) or not all(
        isinstance(e, dict)
        and set(e) == {"metrics", "checkpoint"}
        and isinstance(e["metrics"], dict)
        and all(isinstance(k, str) and _number(v) for k, v in e["metrics"].items())
        and (e["checkpoint"] is None or isinstance(e["checkpoint"], str))
        for e in epochs
    ):
        raise ValueError("epochs are [{metrics: {name: number}, checkpoint: a path or null}]")
    if not isinstance(seconds, dict) or not all(
        isinstance(k, str) and _number(v) and math.isfinite(v) for k, v in seconds.items()
    ):
        raise ValueError("seconds are {run: number}")
    if not isinstance(value["ended"], bool) or not isinstance(value["error"], str):
        raise ValueError("ended is true or false, error a string")
    return TrialRecord(config, epochs, seconds, value["ended"], value["error"])


def parse_journal(data: Any, path: str, is_point: Callable[[dict[str, Any]], bool]) -> SearchJournal:
    """A journal read from `path`, checked: its trials' ids, their configs (each a point of the
    search's space, `is_point`) and the types of everything else."""
    try:
        if not isinstance(data, dict) or set(data) != {"version", "attempts", "trials"} or data["version"] != VERSION:
            raise ValueError(f"not a version-{VERSION} search journal")
        if not isinstance(data["attempts"], int) or isinstance(data["attempts"], bool) or data["attempts"] < 1:
            raise ValueError("attempts is a number >= 1")
        if not isinstance(data["trials"], dict):
            raise ValueError("trials is an object")
        trials = {}
        for trial_id, value in data["trials"].items():
            if not TRIAL_ID.match(trial_id):
                raise ValueError(f"{trial_id!r} is not a trial id")
            try:
                trials[trial_id] = _check_record(value, is_point)
            except ValueError as e:
                raise ValueError(f"trial {trial_id}: {e}") from None
    except ValueError as e:
        raise BadInput(f"{path}: {e}; delete it to search again from the start") from None
    return SearchJournal(trials, data["attempts"])


__all__ = ["TRIAL_ID", "SearchJournal", "TrialRecord", "parse_journal"]
