"""`python -m tests.pipelines.killed_search RECORD [key=value ...]`: the finetune stage's command,
whose search records every result its trials report (trial id, epoch) in the JSON-lines file
RECORD and whose process group is killed (SIGKILL: a lost driver node, an OOM kill) when the second
trial reports its second epoch. Ray Tune keeps the search's callbacks with its state, so a run that
restores the search goes on recording (without killing: it is another process)."""

import dataclasses
import json
import os
import signal
import sys

import ray.tune

from pipelines.cli import stage_main


class RecordTrials(ray.tune.Callback):
    """Appends each trial result to `path`; kills the process group that created it when the
    `kill_at` = (n-th trial, epoch) result arrives."""

    def __init__(self, path: str, kill_at: tuple[int, int] | None = None):
        self.path, self.kill_at, self.pid, self.seen = path, kill_at, os.getpid(), []

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if trial.trial_id not in self.seen:
            self.seen.append(trial.trial_id)
        with open(self.path, "a") as f:
            f.write(json.dumps({"trial": trial.trial_id, "epoch": result["epoch"], "pid": os.getpid()}) + "\n")
        if self.kill_at == (self.seen.index(trial.trial_id) + 1, result["epoch"]) and os.getpid() == self.pid:
            os.killpg(os.getpgid(0), signal.SIGKILL)


RECORD = ""
"""The file RecordingRunConfig's callback appends to (set by the command)."""


@dataclasses.dataclass
class RecordingRunConfig(ray.tune.RunConfig):
    """Ray Tune's RunConfig with a RecordTrials callback added."""

    def __post_init__(self):
        self.callbacks = [*(self.callbacks or []), RecordTrials(RECORD, kill_at=(2, 2))]
        super().__post_init__()


if __name__ == "__main__":
    # by the module's name, not __main__'s: the restoring run unpickles the search's callbacks
    from tests.pipelines import killed_search

    killed_search.RECORD = sys.argv[1]
    ray.tune.RunConfig = killed_search.RecordingRunConfig
    sys.exit(stage_main("finetune", "the fine-tuning stage", sys.argv[2:]))
