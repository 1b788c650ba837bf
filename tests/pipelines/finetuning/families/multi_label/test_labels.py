"""A multi-label cell's classes: a list as it is, text split at the delimiter, each class once."""

import numpy as np

from pipelines.finetuning.families.multi_label.labels import label_set


def test_a_label_cell_is_a_list_or_text_split_at_the_delimiter():
    assert label_set(["sport", "politics", "sport"], "|") == ["sport", "politics"]
    assert label_set(" sport | politics ||", "|") == ["sport", "politics"]
    assert label_set("sport;tech", ";") == ["sport", "tech"]
    assert label_set([1, 2.0, "3"], "|") == ["1", "2", "3"]  # 2.0 in a jsonl is the class "2", as in classification
    assert label_set([], "|") == [] and label_set(np.array(["a", "b"]), "|") == ["a", "b"]
    assert label_set(7, "|") == ["7"]
