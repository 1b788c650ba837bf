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


TRADEOFF = {
    "threads": 2,
    "eval_rows": 40,
    "arms": [
        {
            "name": "teacher",
            "layers": 4,
            "exit_rule": None,
            "metrics": {"accuracy": 0.9},
            "mean_depth": 4.0,
            "rows_per_s": 100.0,
        },
        {
            "name": "student",
            "layers": 2,
            "exit_rule": None,
            "metrics": {"accuracy": 0.85},
            "mean_depth": 2.0,
            "rows_per_s": 190.0,
        },
        {
            "name": "exit, entropy < 0.2",
            "layers": 4,
            "exit_rule": {"patience": None, "entropy": 0.2},
            "metrics": {"accuracy": 0.9},
            "mean_depth": 1.5,
            "rows_per_s": 250.0,
        },
    ],
}


def test_the_tradeoff_is_a_table_of_each_way_of_answering_against_the_teacher_and_a_figure():
    text = depth_section(DISTILLED, None, TRADEOFF, "depth_tradeoff.png")
    assert "on the same 40 eval rows" in text and "2 CPU thread(s)" in text
    assert "| teacher | 4 | 4 | 0.9 | – | 100 | 1.00x |" in text
    assert "| student | 2 | 2 | 0.85 | -0.05 | 190 | 1.90x |" in text
    assert "| exit, entropy < 0.2 | 4 | 1.5 | 0.9 | 0 | 250 | 2.50x |" in text
    assert "![accuracy against rows per second](depth_tradeoff.png)" in text
    assert "depth_tradeoff.png" not in depth_section(DISTILLED, None)


def test_the_tradeoff_figure_is_a_png():
    from pipelines.report.plots import tradeoff_figure

    assert tradeoff_figure(TRADEOFF["arms"], "accuracy")[:8] == b"\x89PNG\r\n\x1a\n"
