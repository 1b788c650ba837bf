"""The data stage's sentence objectives through its Ray Data UDFs, called without Ray: NSP's pools
are the same for any grouping into work units, and `none` writes one-segment rows that the
pretraining plan reads as such. (NSP end to end on Ray: test_data_stage.py.)"""

import json
from pathlib import Path

import numpy as np
import pytest

from pipelines.config import load_config
from pipelines.prep.corpus import Document, list_inputs, read_documents

from .test_data_stage import BUSINESS, read_split


def unit_batch(unit: int, files) -> dict:
    """A work unit as map_units hands it to a Ray Data UDF (no Ray needed to call one)."""
    return {"unit": np.array([unit]), "files": np.array([json.dumps([f.to_row() for f in files])], dtype=object)}


def test_nsp_pools_are_the_same_for_any_work_units(spiece_model):
    """The pools are the corpus's smallest pool hashes per split, whatever the units' grouping, found
    by keys (nothing tokenized) and then tokenized into windows."""
    from pipelines.config import DataSection
    from pipelines.prep.corpus import pack_units
    from pipelines.prep.negatives import pool_hash
    from pipelines.prep.process import DocumentProcessor
    from pipelines.stages.data_pool import PoolKeysFn, PoolWindowsFn, build_pools, pool_keys

    files = list_inputs([BUSINESS], "auto")[:60]
    data = DataSection(max_seq_length=64, validation_fraction=0.3, sentence_objective="nsp", nsp_pool_documents=8)

    def each_unit(fn, units):
        return [json.loads(r) for i, unit in enumerate(units) for r in fn(unit_batch(i, unit))["record"]]

    def pools(workers: int):
        units = pack_units(files, workers)
        keys = pool_keys(each_unit(PoolKeysFn(data, "text"), units), 8)
        last = {split: list(found[-1]) for split, found in keys.items()}
        windows = PoolWindowsFn(spiece_model.read_bytes(), data, True, "text", last)
        return len(units), build_pools(each_unit(windows, units))

    (few, one), (many, other) = pools(1), pools(8)
    assert few < many
    for a, b in ((one.train, other.train), (one.validation, other.validation)):
        assert a.keys == b.keys and np.array_equal(a.tokens, b.tokens) and len(a.keys) == 8
    processor = DocumentProcessor(spiece_model.read_bytes(), data, True)
    docs = [d for f in files for d in read_documents(f) if isinstance(d, Document)]
    train = sorted((pool_hash(data.seed, d.key), d.key) for d in docs if processor.split_of(d) == "train")
    assert one.train.keys == tuple(key for _, key in train[:8])
    first = next(d for d in docs if d.key == train[0][1])
    assert np.array_equal(
        one.train.tokens[: one.train.segment_starts[one.train.document_starts[1]]],
        np.concatenate(processor.pool_window(first)),
    )


def test_none_writes_one_segment_examples_without_a_label_and_pretrains_without_one(spiece_model, tmp_path):
    """data.sentence_objective=none through the stage's UDF (called without Ray): `[CLS] text [SEP]`
    rows, token types 0, no label column, one-sentence documents used; the pretraining plan reads the
    objective from the data's manifest."""
    from pipelines.config import config_to_dict
    from pipelines.errors import BadInput
    from pipelines.stages.data import CreateExamplesFn
    from pipelines.stages.pretrain_plan import plan_pretraining
    from pipelines.train.plan import check_schema

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "one.txt").write_text("A single sentence about the markets")
    for name in ("a", "b", "c"):
        (corpus / f"{name}.txt").write_text(Path(list_inputs([BUSINESS], "auto")[ord(name)].url).read_text())
    run_dir = tmp_path / "run"
    config = load_config(
        None,
        [
            f"run_dir={run_dir}", "data.max_seq_length=64", "data.dupe_factor=1", "data.validation_fraction=0.3",
            "data.sentence_objective=none", "train.global_batch_size=4", "model.preset=tiny",
        ],
    )  # fmt: skip
    create = CreateExamplesFn(spiece_model.read_bytes(), config.data, True, "text", str(run_dir / "data"))
    record = json.loads(create(unit_batch(0, list_inputs([str(corpus)], "auto")))["record"][0])
    assert record["documents_used"] == 4 and record["sentence_order_labels"] == {}
    table = read_split(str(run_dir), "train")
    assert "sentence_order_label" not in table.column_names
    for row in table.to_pylist():
        assert row["input_ids"][0] == 2 and row["input_ids"][-1] == 3 and row["input_ids"].count(3) == 1
        assert set(row["token_type_ids"]) == {0} and len(row["input_ids"]) <= 64

    examples = {"train": table.num_rows, "validation": read_split(str(run_dir), "validation").num_rows}
    sha = "0" * 64
    Path(run_dir, "vocab").mkdir()
    Path(run_dir, "vocab", "manifest.json").write_text(json.dumps({"sha256": sha, "vocab_size": 300}))
    data_manifest = {"examples": examples, "vocab_sha256": sha, "masking": {"mode": "static"}}
    Path(run_dir, "data", "manifest.json").write_text(json.dumps({**data_manifest, "config": config_to_dict(config)}))
    assert plan_pretraining(config, str(tmp_path / "out"), (0, 0)).sentence_objective == "none"
    with pytest.raises(BadInput, match="column 'sentence_order_label' missing"):
        check_schema(str(run_dir / "data" / "train"), False)
