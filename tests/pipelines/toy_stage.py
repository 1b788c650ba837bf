"""A toy sixth stage, declared here as any stage is (one declaration and its run function), for the
lifecycle and lease tests (their fixtures are in conftest.py)."""

from pipelines.config import load_config
from pipelines.rundir.lifecycle import StageRun
from pipelines.rundir.registry import Stage
from pipelines.storage import join, read_bytes, write_text

TOY = Stage(
    "toy", f"{__name__}:build_toy", "a text file from data.seed", config_keys=("data.seed",), outputs=("out.txt",)
)
FAIL_SEED = 666  # the toy stage writes its output, then dies, as a killed run would


def build_toy(run: StageRun) -> dict:
    write_text(run.path("out.txt"), f"seed {run.config.data.seed}")
    if run.config.data.seed == FAIL_SEED:
        raise RuntimeError("killed midway")
    return {"seed": run.config.data.seed}


def configure(run_dir, seed=1, *overrides):
    return load_config(overrides=[f"run_dir={run_dir}", f"data.seed={seed}", *overrides])


def toy_output(run_dir, where="toy"):
    return read_bytes(join(run_dir, where, "out.txt")).decode()
