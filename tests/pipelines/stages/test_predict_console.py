"""What predict's console says of its rows (pipelines/stages/predict.py): the metrics line
(`metrics_line`) tells how many rows were scored against which labels and why others were not, never
an empty "predict: " (which an input whose rows hold no gold label printed); an input of which no
row could be predicted gets a warning naming why."""

import json
import math
from pathlib import Path

from pipelines.config import load_config
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


def test_an_input_whose_every_row_is_rejected_says_so_in_a_warning(classifier, tmp_path, capsys):
    """A jsonl table without the text field: every row counted as rejected, as always, and a line
    that says nothing was predicted and why, where the summary alone read like a finished job."""
    from pipelines.stages.predict import run_predict

    (tmp_path / "rows.jsonl").write_text('{"body": "one"}\n{"body": "two"}\n{"text": ""}\n')
    config = load_config(
        overrides=[f"run_dir={tmp_path}/run", f"predict.model={classifier}", f"predict.input={tmp_path}/rows.jsonl"]
    )
    out = Path(run_predict(config))
    assert json.loads((out / "manifest.json").read_text())["rows"] == {
        "read": 3,
        "predicted": 0,
        "rejected": {"missing_text": 2, "empty_text": 1},
    }
    warning = f"predict: warning: no row was predicted; 2 of 3 were missing_text (first: {tmp_path}/rows.jsonl 0: "
    assert [line for line in capsys.readouterr().out.splitlines() if "warning" in line] == [warning + "missing_text)"]
