"""`python -m tests.pipelines.killed_search RECORD [key=value ...]`: the finetune stage's command,
whose search records every result its trials report (the search's trial id, epoch) in the
JSON-lines file RECORD and whose process group is killed (SIGKILL: a lost driver node, an OOM
kill) when the second trial reports its second epoch. `recording` wraps the search's callbacks the
same way, without the kill, for the run that resumes the search (another process)."""

import json
import os
import signal
import sys

import ray.tune

from pipelines.cli import stage_main
from pipelines.stages import tune_search
from pipelines.stages.search_records import trial_identity


class RecordTrials(ray.tune.Callback):
    """Appends each trial result to `path`; kills the process group that created it when the
    `kill_at` = (n-th trial, epoch) result arrives."""

    def __init__(self, path: str, kill_at: tuple[int, int] | None = None):
        self.path, self.kill_at, self.pid, self.seen = path, kill_at, os.getpid(), []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        trial_id = trial_identity(trial)[0]  # a continued trial is a new Ray Tune trial under its first id
        if trial_id not in self.seen:
            self.seen.append(trial_id)
        with open(self.path, "a") as f:
            f.write(json.dumps({"trial": trial_id, "epoch": result["epoch"], "pid": os.getpid()}) + "\n")
        if self.kill_at == (self.seen.index(trial_id) + 1, result["epoch"]) and os.getpid() == self.pid:
            os.killpg(os.getpgid(0), signal.SIGKILL)


def recording(path: str, kill_at: tuple[int, int] | None = None):
    """tune_search.search_callbacks with a RecordTrials(path, kill_at) after the search's own."""
    callbacks = tune_search.search_callbacks
    recorder = RecordTrials(path, kill_at)
    return lambda *args: [*callbacks(*args), recorder]


if __name__ == "__main__":
    tune_search.search_callbacks = recording(sys.argv[1], kill_at=(2, 2))
    sys.exit(stage_main("finetune", "the fine-tuning stage", sys.argv[2:]))
