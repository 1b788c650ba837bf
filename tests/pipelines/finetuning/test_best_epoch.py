"""Which epoch of a trial is exported: the best among those whose checkpoint Tune or Ray Train
kept, so a tie broken by eval_loss never points at a deleted checkpoint. The epochs are the
search's journal's, their checkpoints paths inside the search's storage."""

import os
import shutil

import pytest

from pipelines.errors import BadInput
from pipelines.finetuning.results import best_kept_epoch
from pipelines.finetuning.search_journal import TrialRecord
from pipelines.stages.tune_search import checkpoint_at


def record(storage, accuracies, losses):
    """A trial whose every epoch saved a checkpoint under `storage`."""
    trial = TrialRecord({"finetune.lr": 0.001})
    for i, (accuracy, loss) in enumerate(zip(accuracies, losses), start=1):
        (storage / "trial" / f"epoch_{i}").mkdir(parents=True)
        (storage / "trial" / f"epoch_{i}" / "weights").write_text(str(i))
        metrics = {"epoch": float(i), "accuracy": accuracy, "eval_loss": loss}
        trial.report("run", metrics, 10.0 * i, f"trial/epoch_{i}")
    return trial


def test_a_tie_broken_by_eval_loss_picks_a_kept_checkpoint(tmp_path):
    # Epochs 2 and 3 tie on accuracy; epoch 2 has the lower eval_loss, but num_to_keep=1 kept the
    # later of the tied pair (and the latest, which is the same one).
    trial = record(tmp_path, [0.5, 0.6, 0.6], [1.0, 0.7, 0.8])
    for epoch in (1, 2):
        shutil.rmtree(tmp_path / "trial" / f"epoch_{epoch}")
    best, checkpoint = best_kept_epoch(trial, "accuracy", checkpoint_at(str(tmp_path)))
    assert best["epoch"] == 3 and checkpoint.path == str(tmp_path / "trial" / "epoch_3")


def test_among_kept_checkpoints_the_lower_eval_loss_wins_a_tie(tmp_path):
    trial = record(tmp_path, [0.6, 0.6, 0.4], [0.9, 0.7, 0.5])
    best, checkpoint = best_kept_epoch(trial, "accuracy", checkpoint_at(str(tmp_path)))
    assert best["epoch"] == 2 and checkpoint.path == str(tmp_path / "trial" / "epoch_2")


def test_an_epoch_whose_checkpoint_was_deleted_is_not_chosen(tmp_path):
    trial = record(tmp_path, [0.5, 0.7, 0.7], [1.0, 0.6, 0.8])
    shutil.rmtree(tmp_path / "trial" / "epoch_2")  # Ray Train deleted the best row's checkpoint
    best, checkpoint = best_kept_epoch(trial, "accuracy", checkpoint_at(str(tmp_path)))
    assert best["epoch"] == 3 and checkpoint.path == str(tmp_path / "trial" / "epoch_3")


def test_a_checkpoint_reads_back_through_the_storage_filesystem(tmp_path):
    trial = record(tmp_path, [0.5, 0.7], [1.0, 0.6])
    _, checkpoint = best_kept_epoch(trial, "accuracy", checkpoint_at(str(tmp_path)))
    checkpoint.to_directory(str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "weights").read_text() == "2"


def test_a_trial_without_any_checkpoint_has_no_best_epoch(tmp_path):
    trial = TrialRecord({"finetune.lr": 0.001})
    trial.report("run", {"epoch": 1.0, "accuracy": 0.5}, 1.0, None)
    trial.end("RuntimeError: boom")
    assert best_kept_epoch(trial, "accuracy", checkpoint_at(str(tmp_path))) == (None, None)


@pytest.mark.parametrize("how", ["dots", "link"])
def test_a_checkpoint_outside_the_storage_is_refused(tmp_path, how):
    """The journal is a file of the run_dir: a checkpoint it names must stay inside the search's
    storage, links resolved, or a forged one would be exported as the best model."""
    storage, elsewhere = tmp_path / "storage", tmp_path / "elsewhere"
    (elsewhere / "epoch_1").mkdir(parents=True)
    storage.mkdir()
    if how == "link":
        os.symlink(elsewhere, storage / "trial")
    trial = TrialRecord({"finetune.lr": 0.001})
    trial.report(
        "run", {"epoch": 1.0, "accuracy": 0.5}, 1.0, "../elsewhere/epoch_1" if how == "dots" else "trial/epoch_1"
    )
    with pytest.raises(BadInput, match="outside"):
        best_kept_epoch(trial, "accuracy", checkpoint_at(str(storage)))
