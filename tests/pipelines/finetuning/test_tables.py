"""Reading tasks from tables: formats, rejection accounting, clear errors, splits and subsamples."""

import json
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import FinetuneSection
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families._sequence.task import load_task
from pipelines.finetuning.labels import label_names
from pipelines.finetuning.tables import Examples, bbc_news_examples, sample_indices, split_indices

ROWS = [
    ("a great film", "pos"),
    ("dull and slow", "neg"),
    ("   ", "pos"),
    ("loved it", None),
    ("terrible", "neg"),
    ("wonderful acting", "pos"),
]


def read_task(cfg):
    """The table's task as finetune.task's family reads it."""
    return load_task(cfg, task_family(cfg.task))


def write_csv(path, rows, header=("text", "label")):
    lines = [",".join(header)] + [f'"{t}",{"" if y is None else y}' for t, y in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def write_jsonl(path, rows, keys=("text", "label")):
    path.write_text("".join(json.dumps(dict(zip(keys, row))) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "tsv", "parquet"])
def test_every_format_reads_string_labels_and_counts_rejected_rows(tmp_path, fmt):
    path = tmp_path / f"train.{fmt}"
    if fmt == "csv":
        write_csv(path, ROWS)
    elif fmt == "jsonl":
        write_jsonl(path, ROWS)
    elif fmt == "tsv":
        path.write_text("text\tlabel\n" + "".join(f"{t}\t{y or ''}\n" for t, y in ROWS))
    else:
        pq.write_table(pa.table({"text": [t for t, _ in ROWS], "label": [y for _, y in ROWS]}), path)
    eval_path = write_jsonl(tmp_path / "eval.jsonl", [("fine film", "pos"), ("bad", "neg")])
    task = read_task(FinetuneSection(train_path=str(path), eval_path=eval_path))
    assert task.label_names == ["neg", "pos"]
    assert task.train.texts == ["a great film", "dull and slow", "terrible", "wonderful acting"]
    assert task.train_targets == [1, 0, 0, 1] and task.eval_targets == [1, 0]
    source = task.accounting["inputs"][0]
    assert source["read"] == 6 and source["usable"] == 4
    assert source["rejected"] == {"empty_text": 1, "missing_label": 1}
    assert f"{path} row 2: empty_text" in source["rejection_examples"]


def test_integer_labels_in_csv_match_string_labels_in_jsonl(tmp_path):
    train = write_csv(tmp_path / "t.csv", [("x", 1), ("y", 0), ("z", 10)])
    evaluation = write_jsonl(tmp_path / "e.jsonl", [("x", "10"), ("y", 0)])
    task = read_task(FinetuneSection(train_path=train, eval_path=evaluation))
    assert task.label_names == ["0", "1", "10"] and task.eval_targets == [2, 0]


def test_text_pairs_reject_an_empty_second_text(tmp_path):
    rows = [("a", "b", "x"), ("c", "", "y"), ("e", "f", "y"), ("g", "h", "x")]
    path = write_jsonl(tmp_path / "p.jsonl", rows, keys=("q", "a", "y"))
    task = read_task(
        FinetuneSection(train_path=path, eval_path=path, text_column="q", text_pair_column="a", label_column="y")
    )
    assert task.train.pairs == ["b", "f", "h"]
    assert task.accounting["inputs"][0]["rejected"] == {"empty_text_pair": 1}


def test_missing_column_names_the_file_and_column(tmp_path):
    path = write_csv(tmp_path / "t.csv", ROWS, header=("sentence", "label"))
    with pytest.raises(
        ValueError, match=r"t\.csv: no column 'text' \(finetune.text_column\); its columns are sentence, label"
    ):
        read_task(FinetuneSection(train_path=path))
    with pytest.raises(ValueError, match=r"no column 'y' \(finetune.label_column\)"):
        read_task(FinetuneSection(train_path=path, text_column="sentence", label_column="y"))


def test_eval_label_unseen_in_training_is_an_error(tmp_path):
    train = write_csv(tmp_path / "t.csv", [("x", "pos"), ("y", "neg")])
    evaluation = write_csv(tmp_path / "e.csv", [("x", "pos"), ("z", "neutral")])
    with pytest.raises(
        ValueError,
        match=r"e\.csv: column 'label' has 1 labels that never appear in the training "
        r"data: 'neutral' \(row 1\)",
    ):
        read_task(FinetuneSection(train_path=train, eval_path=evaluation))


@pytest.mark.parametrize("content, why", [("", "the file is empty"), ("text,label\n", "the file has no rows")])
def test_empty_file_is_an_error(tmp_path, content, why):
    path = tmp_path / "t.csv"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"t.csv: {why}"):
        read_task(FinetuneSection(train_path=str(path)))
    empty_jsonl = tmp_path / "t.jsonl"
    empty_jsonl.write_text("")
    with pytest.raises(ValueError, match="t.jsonl: "):
        read_task(FinetuneSection(train_path=str(empty_jsonl)))


def test_regression_target_must_be_a_number(tmp_path):
    path = write_csv(tmp_path / "t.csv", [("x", "0.5"), ("y", "high"), ("z", "1")])
    with pytest.raises(ValueError, match=r"t\.csv: column 'label' row 1: 'high' is not a finite number"):
        read_task(FinetuneSection(train_path=path, task="regression"))
    good = write_csv(tmp_path / "g.csv", [(f"t{i}", i / 2) for i in range(10)])
    task = read_task(FinetuneSection(train_path=good, task="regression"))
    assert task.label_names is None and task.num_labels == 1
    assert sorted(task.train_targets + task.eval_targets) == [i / 2 for i in range(10)]


def test_csv_cells_are_text_with_no_null_tokens(tmp_path):
    """Issue #27: Arrow's CSV reader took `NA`, `null`, `nan`, `N/A` for missing values (in a numeric
    column) and `007` for 7; a cell is now the text it holds, and only an empty label is missing."""
    rows = [("nan", "1"), ("007", "NA"), ("N/A", "null"), ("true", "2"), ("x", "nan"), ("y", "N/A"), ("z", None)]
    path = write_csv(tmp_path / "t.csv", rows)
    task = read_task(FinetuneSection(train_path=path, eval_path=path))
    assert task.train.texts == ["nan", "007", "N/A", "true", "x", "y"]
    assert task.train.labels == ["1", "NA", "null", "2", "nan", "N/A"]
    assert task.label_names == ["1", "2", "N/A", "NA", "nan", "null"]
    assert task.accounting["inputs"][0]["rejected"] == {"missing_label": 1}
    with pytest.raises(ValueError, match=r"t\.csv: column 'label' row 1: 'NA' is not a finite number"):
        read_task(FinetuneSection(train_path=path, task="regression"))


def test_all_rows_rejected_is_an_error(tmp_path):
    path = write_csv(tmp_path / "t.csv", [("", "a"), (" ", "b")])
    with pytest.raises(ValueError, match=r"t\.csv: no usable rows in column 'text' / 'label'"):
        read_task(FinetuneSection(train_path=path))


def test_split_is_stratified_seeded_and_keeps_duplicates_on_one_side():
    texts = [f"doc {i}" for i in range(100)] + ["dup"] * 5
    labels = ["a"] * 70 + ["b"] * 30 + ["a"] * 5
    examples = Examples("mem", texts, None, labels, list(range(105)))
    train, held = split_indices(examples, 0.2, seed=3, stratify=True)
    assert sorted(train + held) == list(range(105))
    assert Counter(labels[i] for i in held) in (Counter(a=14, b=6), Counter(a=15, b=6), Counter(a=19, b=6))
    dup_sides = {i in held for i in range(100, 105)}
    assert len(dup_sides) == 1
    assert split_indices(examples, 0.2, seed=3, stratify=True) == (train, held)
    assert split_indices(examples, 0.2, seed=4, stratify=True) != (train, held)


def test_subsample_keeps_label_proportions():
    examples = Examples("mem", [str(i) for i in range(100)], None, ["a"] * 80 + ["b"] * 20, list(range(100)))
    picked = sample_indices(examples, 10, seed=0, stratify=True)
    assert len(picked) == 10 and Counter(examples.labels[i] for i in picked) == Counter(a=8, b=2)


def test_embedded_bbc_task_split_and_caps_account_for_every_article():
    task = read_task(FinetuneSection(max_train_examples=100))
    assert task.label_names == ["business", "entertainment", "politics", "sports", "tech"]
    acc = task.accounting
    assert acc["inputs"][0]["read"] == 2225 == len(bbc_news_examples())
    assert acc["train"]["used"] == 100
    assert acc["train"]["used"] + acc["train"]["unsampled"] + acc["eval"]["used"] == 2225
    assert 0.19 < acc["eval"]["used"] / 2225 < 0.21
    sizes = Counter(bbc_news_examples().labels)  # business 510 ... entertainment 386
    for label, count in Counter(task.train_targets).items():
        assert abs(count - 100 * sizes[task.label_names[label]] / 2225) <= 1
    assert label_names(task.train) == task.label_names
    assert not set(task.train.texts) & set(task.eval.texts)  # no duplicate article on both sides


def test_bbc_task_refuses_pairs_and_regression():
    with pytest.raises(ValueError, match="embedded BBC News task"):
        read_task(FinetuneSection(task="regression"))
