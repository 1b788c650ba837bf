"""Which epoch of a trial is exported: the best among those whose checkpoint Tune or Ray Train
kept, so a tie broken by eval_loss never points at a deleted checkpoint."""

import shutil

import pandas as pd
import pyarrow.fs
import ray.tune
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY

from pipelines.stages.tune_search import best_kept_epoch


def epochs(accuracies, losses):
    return [{"epoch": i + 1, "accuracy": a, "eval_loss": loss} for i, (a, loss) in enumerate(zip(accuracies, losses))]


def checkpoint_dirs(tmp_path, n):
    dirs = []
    for i in range(1, n + 1):
        (tmp_path / f"epoch_{i}").mkdir()
        (tmp_path / f"epoch_{i}" / "weights").write_text(str(i))
        dirs.append(str(tmp_path / f"epoch_{i}"))
    return dirs


def tune_result(tmp_path, rows, kept_epochs):
    """A function trainable's result whose Tune kept the checkpoints of `kept_epochs` (1-based)."""
    dirs = checkpoint_dirs(tmp_path, len(rows))
    kept = [(ray.tune.Checkpoint.from_directory(dirs[e - 1]), rows[e - 1]) for e in kept_epochs]
    return dirs, ray.tune.Result(
        metrics=rows[-1],
        checkpoint=None,
        error=None,
        path=str(tmp_path),
        metrics_dataframe=pd.DataFrame(rows),
        best_checkpoints=kept,
    )


def test_a_tie_broken_by_eval_loss_picks_a_kept_checkpoint(tmp_path):
    # Epochs 2 and 3 tie on accuracy; epoch 2 has the lower eval_loss, but num_to_keep=1 kept the
    # later of the tied pair (and the latest, which is the same one).
    dirs, result = tune_result(tmp_path, epochs([0.5, 0.6, 0.6], [1.0, 0.7, 0.8]), [3])
    best, checkpoint = best_kept_epoch(result, "accuracy")
    assert best["epoch"] == 3 and checkpoint.path == dirs[2]


def train_result(tmp_path, rows, paths):
    """A Ray Train trial's result: its rows carry the inner run's checkpoint paths."""
    for row, path in zip(rows, paths):
        row[CHECKPOINT_PATH_KEY] = path
    return ray.tune.Result(
        metrics=rows[-1], checkpoint=None, error=None, path=str(tmp_path), metrics_dataframe=pd.DataFrame(rows)
    )


def test_among_kept_checkpoints_the_lower_eval_loss_wins_a_tie(tmp_path):
    dirs = checkpoint_dirs(tmp_path, 3)
    result = train_result(tmp_path, epochs([0.6, 0.6, 0.4], [0.9, 0.7, 0.5]), dirs)
    best, checkpoint = best_kept_epoch(result, "accuracy")
    assert best["epoch"] == 2 and checkpoint.path == dirs[1]


def test_a_ray_train_trial_uses_the_checkpoints_still_in_its_storage(tmp_path):
    dirs = checkpoint_dirs(tmp_path, 3)
    shutil.rmtree(dirs[1])  # Ray Train deleted epoch 2's checkpoint, the table's best row
    result = train_result(tmp_path, epochs([0.5, 0.7, 0.7], [1.0, 0.6, 0.8]), dirs)
    best, checkpoint = best_kept_epoch(result, "accuracy")
    assert best["epoch"] == 3 and checkpoint.path == dirs[2]


def test_checkpoint_paths_are_read_in_the_storage_filesystem(tmp_path):
    # On s3 the rows hold "bucket/prefix/..." without a scheme: a path inside the storage's
    # filesystem, meaningless to the local one.
    checkpoint_dirs(tmp_path, 2)
    result = train_result(tmp_path, epochs([0.5, 0.7], [1.0, 0.6]), ["epoch_1", "epoch_2"])
    storage = pyarrow.fs.SubTreeFileSystem(str(tmp_path), pyarrow.fs.LocalFileSystem())
    best, checkpoint = best_kept_epoch(result, "accuracy", storage)
    assert best["epoch"] == 2 and checkpoint.filesystem is storage
    checkpoint.to_directory(str(tmp_path / "copy"))
    assert (tmp_path / "copy" / "weights").read_text() == "2"


def test_a_trial_without_any_checkpoint_has_no_best_epoch(tmp_path):
    result = ray.tune.Result(metrics=None, checkpoint=None, error=RuntimeError("boom"), path=str(tmp_path))
    assert best_kept_epoch(result, "accuracy") == (None, None)
