"""`python -m tests.pipelines.paused_stage READY WHERE [key=value ...]`: the toy stage's command,
whose process stops itself (SIGSTOP) as a VM suspend or a long pause would: right before its
commit (WHERE=commit), or inside its build, after the lifecycle marked `_building/toy` as its own
and before the stage wrote anything (WHERE=build). It first creates the file READY so that the test
knows. The test lets another run take the lease over, then resumes it (SIGCONT)."""

import os
import signal
import sys
from pathlib import Path

from pipelines.cli import stage_main
from pipelines.rundir import lifecycle
from pipelines.rundir.registry import STAGES

from .toy_stage import TOY, build_toy

real_commit = lifecycle.commit


def pause() -> None:
    Path(sys.argv[1]).touch()
    os.kill(os.getpid(), signal.SIGSTOP)


def paused_commit(run_dir, name, fence):
    pause()
    return real_commit(run_dir, name, fence)


def paused_build(run):
    pause()
    return build_toy(run)


if __name__ == "__main__":
    STAGES["toy"] = TOY
    if sys.argv[2] == "commit":
        lifecycle.commit = paused_commit
    else:
        lifecycle.run_function = lambda name: paused_build
    sys.exit(stage_main("toy", "the toy stage", sys.argv[3:]))
