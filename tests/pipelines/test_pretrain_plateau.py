"""Issue #17, acceptance 4: the plateau warning fires on a recipe measured to stay on the unigram
plateau (LAMB at a global batch of 64, the paper's lr 0.00176, the tiny preset, a hundred CPU steps
on the embedded corpus), and names the numbers and the causes; configs/learning-tiny.yaml,
which leaves the plateau, gets no warning (asserted in test_pretrain_learns.py)."""

import json
from pathlib import Path

import pytest

from pipelines.config import load_config
from pipelines.stages.pretrain import run_pretrain

from .runs import LEARNING_RECIPE, copy_inputs

pytestmark = [pytest.mark.slow, pytest.mark.learning]

STEPS, WARMUP = 100, 10
PLATEAU_RECIPE = [
    "train.optimizer=lamb",
    "train.lr=0.00176",
    "train.global_batch_size=64",
    f"train.max_steps={STEPS}",
    f"train.warmup_steps={WARMUP}",
    f"train.eval_every={STEPS}",
    f"train.checkpoint_every={STEPS}",
    "train.log_every=50",
    f"train.health.plateau_after_steps={STEPS - WARMUP}",
    "train.max_failures=0",
]


def test_the_plateau_warning_fires_on_a_run_that_stays_on_the_plateau(embedded_run, tmp_path):
    run_dir = copy_inputs(embedded_run, tmp_path / "run")
    run_pretrain(load_config(LEARNING_RECIPE, [f"run_dir={run_dir}", *PLATEAU_RECIPE]))
    lines = [json.loads(x) for x in Path(run_dir, "pretrain", "metrics.jsonl").read_text().splitlines()]
    plateau = [r for r in lines if r.get("event") == "plateau"]
    final = next(r for r in lines if r.get("final"))
    assert len(plateau) == 1, [r for r in lines if "event" in r]
    warning = plateau[0]
    # the final pass is the one checked
    assert warning["step"] == STEPS and warning["mlm_accuracy"] == final["mlm_accuracy"]
    assert warning["mlm_accuracy"] <= warning["unigram_baseline"] + 0.01
    assert 0.03 < warning["unigram_baseline"] < 0.2  # the most frequent masked piece's share
    assert "LAMB at a global batch of 64" in warning["message"]
    assert f"{warning['unigram_baseline']:.3f}" in warning["message"]
