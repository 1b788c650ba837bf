"""A killed fine-tuning trial continues from its last epoch checkpoint (fit_trial's resume_from) as
if it had never stopped: the checkpoint's weights and TRAINER_STATE (optimizer, schedule, epochs
done, dropout's generator), left out of the exported model."""

import contextlib
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from pipelines.config import FinetuneSection
from pipelines.errors import MissingInput
from pipelines.finetuning.trial import EXPORT_SKIPS, TRAINER_STATE, fit_trial
from tests.pipelines.finetuning.test_step import toy_trial_data

# Dropout on (the tiny model's encoder has none): a continued run that drew other masks would differ.
CFG = FinetuneSection(epochs=3, batch_size=4, classifier_dropout=0.5)


class Killed(Exception):
    """The trial's process dying right after an epoch's report."""


def run(pretrained: str, root: str, cfg: FinetuneSection = CFG, resume_from: str | None = None, kill_after=None):
    """fit_trial's reports as (metrics without the wall time, checkpoint); `kill_after` an epoch."""
    reports = []

    def report(metrics, checkpoint):
        reports.append(({k: v for k, v in metrics.items() if k != "epoch_seconds"}, checkpoint))
        if metrics["epoch"] == kill_after:
            raise Killed

    with contextlib.suppress(Killed):
        fit_trial(cfg, toy_trial_data(), pretrained, root, report, resume_from=resume_from)
    return reports


@pytest.fixture(scope="module")
def uninterrupted(tiny_pretrained, tmp_path_factory):
    return run(tiny_pretrained, str(tmp_path_factory.mktemp("uninterrupted")))


def test_a_resumed_trial_reports_the_uninterrupted_runs_later_epochs(tiny_pretrained, uninterrupted, tmp_path):
    killed = run(tiny_pretrained, str(tmp_path / "killed"), kill_after=1)
    assert [m["epoch"] for m, _ in killed] == [1]
    resumed = run(tiny_pretrained, str(tmp_path / "resumed"), resume_from=killed[0][1])
    assert [m["epoch"] for m, _ in resumed] == [2, 3]
    # Exact: the continued run does the same float operations on the same bits (same weights, moments,
    # lr, batch order and dropout masks, one process on the CPU). Any missed state shows; none is noise.
    assert [m for m, _ in resumed] == [m for m, _ in uninterrupted[1:]]
    assert killed[0][0] == uninterrupted[0][0]
    final = load_file(os.path.join(resumed[-1][1], "model.safetensors"))
    expected = load_file(os.path.join(uninterrupted[-1][1], "model.safetensors"))
    assert final.keys() == expected.keys() and any(k.startswith("classifier.") for k in final)
    assert all(torch.equal(final[k], expected[k]) for k in final)


def test_every_epoch_checkpoint_holds_the_trainer_state_and_the_export_skips_it(uninterrupted):
    assert TRAINER_STATE in EXPORT_SKIPS
    for epoch, (metrics, checkpoint) in enumerate(uninterrupted, start=1):
        assert os.path.basename(checkpoint) == f"epoch_{epoch}" and metrics["epoch"] == epoch
        state = torch.load(os.path.join(checkpoint, TRAINER_STATE), map_location="cpu", weights_only=True)
        assert state["epochs"] == epoch
        assert state["schedule"]["last_epoch"] == epoch * 4  # 16 examples in batches of 4
        assert len(state["rng"]) == 1 and state["optimizer"]["state"]


def test_a_trial_resumed_after_its_last_epoch_reports_nothing(tiny_pretrained, uninterrupted, tmp_path):
    assert run(tiny_pretrained, str(tmp_path), resume_from=uninterrupted[-1][1]) == []
    assert os.listdir(tmp_path) == []  # no checkpoint written either
    fewer = FinetuneSection(epochs=2, batch_size=4, classifier_dropout=0.5)
    assert run(tiny_pretrained, str(tmp_path), fewer, resume_from=uninterrupted[-1][1]) == []


def test_a_checkpoint_without_trainer_state_is_refused(tiny_pretrained, uninterrupted, tmp_path):
    weights_only = tmp_path / "epoch_1"
    shutil.copytree(uninterrupted[0][1], weights_only, ignore=shutil.ignore_patterns(*EXPORT_SKIPS))
    with pytest.raises(MissingInput, match=TRAINER_STATE):
        run(tiny_pretrained, str(tmp_path / "resumed"), resume_from=str(weights_only))
