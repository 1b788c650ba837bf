"""What a fine-tuning search's driver records as its trials report (Ray Tune callbacks): the journal
an interrupted search resumes from (pipelines/finetuning/search_journal.py) and each trial's
trackers (pipelines/tracking/search.py).

A trial keeps its id across attempts: a resumed search runs an unfinished trial again as a new Ray
Tune trial whose config names the trial it continues (CONTINUES), and everything recorded about it
goes under the first id."""

from __future__ import annotations

import json
import os
from typing import Any

import ray.tune
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY
from ray.tune.result import AUTO_RESULT_KEYS

from ..finetuning.search_journal import SearchJournal, TrialRecord
from ..storage import arrow_filesystem, key_relpath, write_text
from ..tracking import Trackers, new_switches, scalars
from ..tracking.search import SearchTracking, open_trial

CONTINUES = "continues"
"""The config key of a continued trial: the id of the trial it continues."""


def finetune_keys(config: dict[str, Any]) -> dict[str, Any]:
    """A trial config's `finetune.KEY` draws, as plain Python values."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in config.items() if k.startswith("finetune.")}


def trial_identity(trial: ray.tune.experiment.Trial) -> tuple[str, bool]:
    """(The id the search knows the trial by, whether it continues one an earlier attempt ran)."""
    continued = trial.config.get(CONTINUES)
    return (continued, True) if continued else (trial.trial_id, False)


def error_line(trial: ray.tune.experiment.Trial) -> str:
    """The first line of the trial's last error, from the text file Ray Tune writes beside the
    pickled one: "Failure # N (occurred at ...)", then the error."""
    path = trial.error_file
    lines = []
    if path and os.path.exists(path):
        with open(path) as f:
            lines = f.read().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Failure # ")]
    return lines[starts[-1] + 1] if starts and starts[-1] + 1 < len(lines) else "the trial failed"


class JournalWriter(ray.tune.Callback):
    """Keeps the search's journal at `path` (JSON in the search's storage) as trials start, report,
    save their checkpoints and end; checkpoints are recorded relative to `storage`."""

    def __init__(self, journal: SearchJournal, path: str, storage: str):
        self.journal, self.path = journal, path
        self.root = arrow_filesystem(storage)[1]

    def save(self) -> None:
        write_text(self.path, json.dumps(self.journal.to_json()) + "\n")

    def relative(self, path: Any) -> str | None:
        """A checkpoint path of the storage's filesystem, relative to the storage (None outside it)."""
        if not isinstance(path, str):
            return None
        relative = key_relpath(path, self.root)
        return None if relative == "." or relative.startswith("../") else relative

    def record(self, trial: ray.tune.experiment.Trial) -> TrialRecord:
        return self.journal.trials[trial_identity(trial)[0]]

    def on_trial_start(self, iteration, trials, trial, **info) -> None:
        self.journal.trials.setdefault(trial_identity(trial)[0], TrialRecord(finetune_keys(trial.config)))
        self.save()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        # A Ray Train trial's checkpoint comes with its result; a single-process trial's is saved
        # after it (on_checkpoint).
        checkpoint = self.relative(result.get(CHECKPOINT_PATH_KEY))
        seconds = float(result.get("time_total_s", 0.0))
        self.record(trial).report(trial.trial_id, scalars(result, skip=AUTO_RESULT_KEYS), seconds, checkpoint)
        self.save()

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info) -> None:
        if (relative := self.relative(checkpoint.path)) is not None:
            self.record(trial).checkpointed(relative)
            self.save()

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.record(trial).end()
        self.save()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.record(trial).end(error_line(trial))
        self.save()


class TrialTracking(ray.tune.Callback):
    """Each trial's epochs to its trackers (pipelines/tracking/search.py), in the search's driver: a
    trial's runs open at its first result and end with it. A continued trial reopens the runs of
    the trial it continues."""

    def __init__(self, search: SearchTracking):
        self.search = search
        self.trials: dict[str, Trackers] = {}
        self.switches = new_switches()  # shared by the trials: a failing backend warns once per search

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if trial.trial_id not in self.trials:
            trial_id, continued = trial_identity(trial)
            params = finetune_keys(trial.config)
            self.trials[trial.trial_id] = open_trial(self.search, trial_id, params, self.switches, continued)
        metrics = scalars(result, skip=(*AUTO_RESULT_KEYS, "epoch"))
        self.trials[trial.trial_id].log_metrics(metrics, int(result.get("epoch", result["training_iteration"])))

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        self.trials.pop(trial.trial_id, Trackers()).close()

    def on_trial_error(self, iteration, trials, trial, **info) -> None:
        self.trials.pop(trial.trial_id, Trackers()).close(failed=True)


def search_callbacks(writer: JournalWriter, tracking: SearchTracking | None) -> list[ray.tune.Callback]:
    """The callbacks of every Ray Tune run of a search: the journal first, so that what a tracker
    or a later callback sees is already recorded."""
    return [writer, *([TrialTracking(tracking)] if tracking is not None else [])]


__all__ = ["CONTINUES", "JournalWriter", "TrialTracking", "error_line", "finetune_keys", "search_callbacks"]
