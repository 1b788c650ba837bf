"""GLUE's nine tasks read from files in GLUE's own layouts (tests/data/glue): the presets' columns,
CoLA's header-less files, stray quotes in tsv text, a malformed row counted; finetune.column_names'
errors; the two-class F1 GLUE reports for MRPC and QQP."""

from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import f1_score

from pipelines.config import FinetuneSection, load_config, task_configs
from pipelines.config.glue import GLUE_TASKS
from pipelines.errors import BadInput
from pipelines.finetuning.families._sequence.task import load_task
from pipelines.finetuning.families.classification.metrics import classification_metrics
from pipelines.finetuning.families.classification.training import CLASSIFICATION
from pipelines.finetuning.tables import Examples, table_examples

GLUE_DIR = Path(__file__).resolve().parents[2] / "data" / "glue"


def glue_finetune(name: str) -> FinetuneSection:
    config = load_config(None, [f"finetune.tasks={{{name}: {{}}}}", f"finetune.glue_dir={GLUE_DIR}"])
    return task_configs(config)[name].finetune


def read(cfg: FinetuneSection, path: str) -> Examples:
    """A file read as the sequence family reads finetune.train_path and eval_path."""
    return table_examples(
        path,
        cfg.text_column,
        cfg.label_column,
        cfg.text_pair_column,
        numeric=cfg.task == "regression",
        column_names=cfg.column_names,
    )


def expected(path: str, cfg: FinetuneSection) -> dict:
    """What the file holds, split by hand: the header (unless column_names), the well-formed rows'
    texts, pairs and labels with their row numbers, and the malformed rows' line numbers."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    names = cfg.column_names or lines[0].split("\t")
    first = 0 if cfg.column_names else 1
    rows = [line.split("\t") for line in lines[first:]]
    good = [(i, fields) for i, fields in enumerate(rows) if len(fields) == len(names)]
    column = {name: names.index(name) for name in names}

    def cells(name: str | None) -> list[str] | None:
        return None if name is None else [fields[column[name]] for _, fields in good]

    labels = [cell.strip() for cell in cells(cfg.label_column)]
    return {
        "read": len(rows),
        "rows": [i for i, _ in good],
        "texts": cells(cfg.text_column),
        "pairs": cells(cfg.text_pair_column),
        "labels": [float(y) for y in labels] if cfg.task == "regression" else labels,
        "malformed_lines": [first + i + 1 for i, fields in enumerate(rows) if len(fields) != len(names)],
    }


def glue_files(cfg: FinetuneSection) -> list[str]:
    return [cfg.train_path, cfg.eval_path, *(cfg.extra_eval_paths or {}).values()]


@pytest.mark.parametrize("name", sorted(GLUE_TASKS))
def test_every_glue_preset_reads_what_its_files_hold(name):
    cfg = glue_finetune(name)
    paths = glue_files(cfg)
    assert all(Path(p).is_file() for p in paths) and len(paths) == (3 if name == "mnli" else 2)
    for path in paths:
        examples, want = read(cfg, path), expected(path, cfg)
        assert len(examples) >= 2, path
        assert examples.texts == want["texts"], path
        assert examples.pairs == want["pairs"], path
        assert examples.labels == want["labels"], path
        assert examples.rows == want["rows"], path
        assert examples.read == want["read"] == len(examples) + sum(examples.rejected.values()), path
        assert examples.rejected == ({"malformed_row": len(want["malformed_lines"])} if want["malformed_lines"] else {})
        assert examples.rejection_examples == [f"{path} line {n}: malformed_row" for n in want["malformed_lines"]]


def test_stray_quotes_are_text_in_glue_tsv():
    configs = [glue_finetune(name) for name in GLUE_TASKS]
    texts = [t for cfg in configs for path in glue_files(cfg) for t in read(cfg, path).texts]
    assert sum('"' in t for t in texts) >= 5
    cola = read(glue_finetune("cola"), glue_finetune("cola").train_path)
    assert 'The sailors rode the breeze clear of the rocks, he said "slowly.' in cola.texts


def test_cola_is_read_without_a_header_and_qqp_counts_its_malformed_row():
    cola = glue_finetune("cola")
    assert cola.column_names == ["source", "label", "original_label", "sentence"]
    first = read(cola, cola.train_path)
    assert first.read == 5 and first.labels[:3] == ["1", "1", "0"]
    assert first.texts[0] == "Our friends won't buy this analysis, let alone the next one we propose."

    qqp = glue_finetune("qqp")
    train = read(qqp, qqp.train_path)
    # header, two rows, then the row of four fields on line 4
    assert train.read == 5 and len(train) == 4 and train.rejected == {"malformed_row": 1}
    assert train.rejection_examples == [f"{qqp.train_path} line 4: malformed_row"]
    assert train.rows == [0, 1, 3, 4]  # a row keeps its number in the file
    assert train.labels == ["0", "1", "0", "1"]


def test_the_sequence_family_counts_a_malformed_row_in_its_accounting():
    task = load_task(glue_finetune("qqp"), CLASSIFICATION)
    train = task.accounting["inputs"][0]
    assert train["read"] == 5 and train["usable"] == 4 and train["rejected"] == {"malformed_row": 1}
    assert task.label_names == ["0", "1"]


def test_a_tsv_row_with_too_many_fields_is_counted_too(tmp_path):
    path = tmp_path / "t.tsv"
    path.write_text("text\tlabel\na\t1\nb\t0\textra\nc\t0\n")
    examples = table_examples(str(path), "text", "label", None, numeric=False)
    assert examples.texts == ["a", "c"] and examples.rows == [0, 2]
    assert examples.read == 3 and examples.rejection_examples == [f"{path} line 3: malformed_row"]


def test_column_names_with_another_column_count_is_an_error_naming_the_file(tmp_path):
    cola = glue_finetune("cola")
    with pytest.raises(BadInput, match=r"CoLA/train\.tsv: its first row has 4 columns.*column_names gives 3"):
        table_examples(
            cola.train_path, "sentence", "label", None, numeric=False, column_names=["a", "label", "sentence"]
        )
    path = tmp_path / "t.csv"
    path.write_text("x,1\ny,0\n")
    with pytest.raises(BadInput, match=r"t\.csv: its first row has 2 columns.*gives 3"):
        table_examples(str(path), "text", "label", None, numeric=False, column_names=["text", "label", "extra"])
    examples = table_examples(str(path), "text", "label", None, numeric=False, column_names=["text", "label"])
    assert examples.texts == ["x", "y"] and examples.labels == ["1", "0"] and examples.read == 2


def test_column_names_on_jsonl_or_parquet_is_an_error_naming_the_key(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"text": "a", "label": 1}\n')
    with pytest.raises(BadInput, match=r"t\.jsonl: finetune\.column_names"):
        table_examples(str(path), "text", "label", None, numeric=False, column_names=["text", "label"])


def test_binary_f1_is_sklearns_f1_of_the_second_class():
    targets = np.array([1, 1, 0, 0, 1, 0, 1, 1])
    predictions = np.array([1, 0, 1, 0, 1, 0, 0, 1])
    m = classification_metrics(np.eye(2)[predictions] * 5.0, targets, 2)
    # tp=3 fp=1 fn=2: F1 = 2*3 / (2*3 + 1 + 2)
    assert m["f1"] == pytest.approx(6 / 9) == f1_score(targets, predictions)
    three = classification_metrics(np.eye(3)[[0, 1, 2]] * 5.0, np.array([0, 1, 1]), 3)
    assert "f1" not in three
