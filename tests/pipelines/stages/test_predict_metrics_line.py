"""The console line of predict's metrics (pipelines/stages/predict.py `metrics_line`): a user sees how
many rows were scored against which labels and why others were not, never an empty "predict: "
(which an input whose rows hold no gold label printed)."""

import math

from pipelines.stages.predict import metrics_line


def test_the_line_says_what_was_scored_against_what_and_what_was_not():
    metrics = {"rows": 1, "label_not_a_class": 1, "accuracy": 1.0, "macro_f1": 0.2, "eval_loss": math.nan}
    assert metrics_line(metrics, "predict.label_column=gold", 2) == (
        "1 of 2 rows scored against predict.label_column=gold (1 label_not_a_class, not scored): "
        "accuracy 1.0000, macro_f1 0.2000"
    )


def test_rows_without_any_gold_label_say_so_instead_of_an_empty_line():
    assert metrics_line({"rows": 0, "label_not_a_class": 0}, "predict.label_column=gold", 2) == (
        "0 of 2 rows scored against predict.label_column=gold: no gold label to score"
    )
    assert metrics_line({"rows": 0, "label_not_answers": 3}, "the files' gold labels", 3) == (
        "0 of 3 rows scored against the files' gold labels (3 label_not_answers, not scored): no gold label to score"
    )
