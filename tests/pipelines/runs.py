"""Config files and run_dir helpers shared by the stage tests."""

import shutil
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
LEARNING_RECIPE = str(CONFIGS / "learning-tiny.yaml")
TINY = str(CONFIGS / "tiny.yaml")


def copy_inputs(source, run_dir, stages=("vocab", "data")) -> Path:
    """A new run_dir holding a copy of `source`'s complete stage outputs, for a test that writes."""
    for stage in stages:
        shutil.copytree(Path(source, stage), Path(run_dir, stage))
    return Path(run_dir)
