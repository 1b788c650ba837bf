"""The multi-label family (finetune.task=multi_label): label sets read from jsonl and parquet lists
and from delimited text cells, every row used or counted, classes the training data never had
refused by file and row, and a loss that is transformers' for problem_type
"multi_label_classification" on the same logits."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import transformers

from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families._sequence.task import load_task
from pipelines.finetuning.families.multi_label.training import MULTI_LABEL


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_jsonl_lists_and_delimited_csv_give_the_same_targets(tmp_path):
    rows = [
        {"text": "rates rise as the election nears", "labels": ["business", "politics"]},
        {"text": "the striker scored twice", "labels": ["sport"]},
        {"text": "a quiet day", "labels": []},  # no class: every target 0, kept
        {"text": "", "labels": ["sport"]},  # rejected: empty_text
        {"text": "no labels key at all"},  # rejected: missing_label
        {"text": "chips and tariffs", "labels": ["business", "tech"]},
    ]
    write_jsonl(tmp_path / "train.jsonl", rows)
    (tmp_path / "eval.csv").write_text("text,labels\nvotes counted,politics\nnew phone out,tech|business\n")
    cfg = FinetuneSection(
        task="multi_label",
        train_path=str(tmp_path / "train.jsonl"),
        eval_path=str(tmp_path / "eval.csv"),
        label_column="labels",
    )
    task = load_task(cfg, MULTI_LABEL)
    assert task.label_names == ["business", "politics", "sport", "tech"]
    assert task.train.texts == [rows[i]["text"] for i in (0, 1, 2, 5)]
    assert task.train_targets.tolist() == [[1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0], [1, 0, 0, 1]]
    assert task.train_targets.dtype == np.float32
    assert task.eval_targets.tolist() == [[0, 1, 0, 0], [1, 0, 0, 1]]
    source = task.accounting["inputs"][0]
    assert source["read"] == 6 and source["usable"] == 4
    assert source["rejected"] == {"empty_text": 1, "missing_label": 1}


def test_a_parquet_list_column_is_read_and_an_unseen_class_is_refused_by_row(tmp_path):
    table = pa.table({"text": ["one", "two", "three"], "tags": [["a"], ["a", "b"], ["b"]]})
    pq.write_table(table, tmp_path / "train.parquet")
    write_jsonl(tmp_path / "eval.jsonl", [{"text": "x", "tags": ["a"]}, {"text": "y", "tags": ["c", "a"]}])
    cfg = FinetuneSection(
        task="multi_label", train_path=str(tmp_path / "train.parquet"), label_column="tags", eval_fraction=0.34
    )
    task = load_task(cfg, MULTI_LABEL)
    assert task.label_names == ["a", "b"] and len(task.train) + len(task.eval) == 3
    cfg = FinetuneSection(
        task="multi_label",
        train_path=str(tmp_path / "train.parquet"),
        eval_path=str(tmp_path / "eval.jsonl"),
        label_column="tags",
    )
    with pytest.raises(BadInput, match=r"eval\.jsonl: column 'tags' has 1 labels .*'c' \(row 1\).*classes are a, b"):
        load_task(cfg, MULTI_LABEL)


def test_a_training_set_without_any_class_is_refused(tmp_path):
    write_jsonl(tmp_path / "train.jsonl", [{"text": f"t{i}", "label": []} for i in range(5)])
    with pytest.raises(BadInput, match="holds no class in the training examples"):
        load_task(FinetuneSection(task="multi_label", train_path=str(tmp_path / "train.jsonl")), MULTI_LABEL)


def test_the_loss_is_transformers_multi_label_loss(tmp_path, tiny_pretrained):
    """Summed over examples, each example's mean BCE over its classes: divided by the batch, what
    transformers' AlbertForSequenceClassification computes with problem_type multi_label."""
    family = task_family("multi_label")
    assert family.problem_type == "multi_label_classification" and family.target_dtype == torch.float32
    model = transformers.AlbertForSequenceClassification.from_pretrained(
        tiny_pretrained, num_labels=4, problem_type="multi_label_classification"
    ).eval()
    ids = torch.tensor([[2, 40, 41, 3], [2, 50, 3, 0], [2, 60, 61, 3]])
    targets = torch.tensor([[1.0, 0, 1, 0], [0, 0, 0, 0], [0, 1, 1, 1]])
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=targets)
    ours = family.loss_sum(out.logits, targets) / len(ids)
    torch.testing.assert_close(ours, out.loss, rtol=1e-6, atol=1e-7)


def test_a_blank_delimiter_is_a_config_error():
    with pytest.raises(ValueError, match=r"label_delimiter=' ': must not be empty or blank"):  # pydantic's
        FinetuneSection(task="multi_label", label_delimiter=" ")
