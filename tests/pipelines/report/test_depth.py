"""The report's depth section: the student beside its teacher on the same eval rows, the seeds'
spread, and the exit-depth histogram of predict's manifest; nothing where the run has neither."""

from pipelines.report.depth import depth_section

DISTILLED = {
    "metric": "accuracy",
    "value": 0.85,
    "trial_id": "t1",
    "epoch": 2,
    "student_layers": 2,
    "teacher": {"model": "runs/x/finetune/best", "num_hidden_layers": 4, "metrics": {"accuracy": 0.875}},
    "repeats": {"mean": 0.84, "std": 0.01, "runs": [{}, {}, {}]},
}


def test_the_student_is_shown_beside_its_teacher_with_the_loss_in_the_metric():
    text = depth_section(DISTILLED, None)
    assert "| teacher | 4 | 0.875 |" in text
    assert "| student | 2 | 0.85 | -0.025 |" in text
    assert "| student (seeds) | 2 | 0.84 | -0.035 | 0.84 ± 0.01 over 3 seeds |" in text
    assert "Early exit" not in text


def test_the_exit_depth_histogram_counts_predicts_rows_per_depth():
    manifest = {"exit_depths": {"2": 30, "3": 10, "4": 10}, "exit_rule": {"patience": 1, "entropy": None}}
    text = depth_section(None, manifest)
    assert "50 rows at a mean depth of 2.60 (predict.exit_patience=1)" in text
    assert "| 2 | 30 | 0.6 | " + "#" * 40 + " |" in text and "| 4 | 10 | 0.2 | " + "#" * 13 + " |" in text
    assert depth_section(None, {"rows": {}}) == "" and depth_section(None, None) == ""
