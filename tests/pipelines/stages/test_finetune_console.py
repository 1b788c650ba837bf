"""What the finetune stage's console says of its task's rows (pipelines/stages/finetune.py
`rejected_line`): an input with rejected rows gets one warning line with the counts by reason and
the first example (they were only in manifest.json); an input without any, nothing."""

from pipelines.stages.finetune import rejected_line


def test_an_input_with_rejected_rows_gets_a_line_naming_them_and_one_without_none():
    source = {
        "source": "own.csv",
        "read": 154,
        "usable": 150,
        "rejected": {"empty_text": 2, "malformed_row": 1, "missing_label": 1},
        "rejection_examples": ["own.csv row 150: empty_text", "own.csv line 154: malformed_row"],
    }
    assert rejected_line(source) == (
        "own.csv: 4 of 154 rows rejected (2 empty_text, 1 malformed_row, 1 missing_label); "
        "first: own.csv row 150: empty_text"
    )
    assert rejected_line({"source": "bbc", "read": 2225, "usable": 2225, "rejected": {}}) is None


def test_question_answering_s_examples_by_reason_are_read_too():
    source = {
        "source": "train.json",
        "read": 203,
        "rejected": {"answer_start_mismatch": 1, "missing_field": 1},
        "rejection_examples": {"answer_start_mismatch": ["train.json q7: answer_start_mismatch"], "missing_field": []},
    }
    assert rejected_line(source) == (
        "train.json: 2 of 203 rows rejected (1 answer_start_mismatch, 1 missing_field); "
        "first: train.json q7: answer_start_mismatch"
    )
