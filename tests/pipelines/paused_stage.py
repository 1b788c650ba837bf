"""`python -m tests.pipelines.paused_stage READY [key=value ...]`: the toy stage's command, whose
process stops itself (SIGSTOP) right before its commit, as a VM suspend or a long pause would; it
first creates the file READY so that the test knows. The test lets another run take the lease over,
then resumes it (SIGCONT)."""

import os
import signal
import sys
from pathlib import Path

from pipelines.cli import stage_main
from pipelines.rundir import lifecycle
from pipelines.rundir.registry import STAGES

from .toy_stage import TOY

real_commit = lifecycle.commit


def paused_commit(run_dir, name, fence):
    Path(sys.argv[1]).touch()
    os.kill(os.getpid(), signal.SIGSTOP)
    return real_commit(run_dir, name, fence)


if __name__ == "__main__":
    STAGES["toy"] = TOY
    lifecycle.commit = paused_commit
    sys.exit(stage_main("toy", "the toy stage", sys.argv[2:]))
