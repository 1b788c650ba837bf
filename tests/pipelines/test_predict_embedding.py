"""`albert-ray predict` with predict.output_kind=embedding (issue #46): each row's sentence vector in
the `embedding` column, equal within 1e-5 to plain transformers' `AutoModel` last hidden state
mean-pooled over the attention mask (or read at [CLS], L2-normalised on request), for the pretrain
stage's kind of folder (the encoder alone, which prediction refuses) and for a fine-tuned export of
the shared suite (its head ignored; text pairs with their segment ids, cut at its recorded length);
in the command's own process, and on Ray Data alike (e2e)."""

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config

from .embedding_reference import ROWS, transformers_embeddings

PAIRS = [row for row in ROWS if "text_pair" in row] + [
    {"text": "The team won the final.", "text_pair": "A match was played " * 20},
    {"text": "Parliament debated the budget.", "text_pair": "Nobody spoke."},
]
"""Pairs of unequal lengths, one longer than the suite's fine-tuned length."""


def embed(model: str, rows: list[dict], scratch: Path, *settings: str) -> tuple[dict[str, dict], dict]:
    """predict's output rows by id and its manifest, for `rows` written as jsonl."""
    from pipelines.stages.predict import run_predict

    (scratch / "rows.jsonl").write_text("".join(json.dumps({"id": str(i), **r}) + "\n" for i, r in enumerate(rows)))
    overrides = [
        f"run_dir={scratch}/run",
        f"predict.model={model}",
        f"predict.input={scratch}/rows.jsonl",
        "predict.id_column=id",
        "predict.output_kind=embedding",
        *settings,
    ]
    out = Path(run_predict(load_config(overrides=overrides)))
    table = pq.read_table(out / "predictions")
    assert table.schema.field("embedding").type == pa.list_(pa.float32())
    return {row["id"]: row for row in table.to_pylist()}, json.loads((out / "manifest.json").read_text())


def check(got: dict[str, dict], expected: np.ndarray) -> None:
    assert sorted(got) == [str(i) for i in range(len(expected))]
    assert all(got[str(i)]["rejected"] is None for i in range(len(expected)))
    vectors = np.array([got[str(i)]["embedding"] for i in range(len(expected))])
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_predict_embeds_a_pretraining_export_as_transformers_mean_pools_it(tiny_pretrained, tmp_path, capsys):
    rows = [row for row in ROWS if "text_pair" not in row]
    got, manifest = embed(tiny_pretrained, rows, tmp_path)
    assert "predicted in this process, without Ray" in capsys.readouterr().out
    check(got, transformers_embeddings(tiny_pretrained, rows)["mean", False])
    assert set(got["0"]) == {"id", "embedding", "label", "rejected"}  # no prediction columns
    assert (manifest["kind"], manifest["embedding"], manifest["workers"]) == (
        "embedding",
        {"pooling": "mean", "normalize": False},
        0,
    )
    assert manifest["rows"] == {"read": len(rows), "predicted": len(rows), "rejected": {}}


@pytest.mark.slow
def test_predict_embeds_a_fine_tuned_export_s_pairs_at_cls_normalised(family_suite, tmp_path):
    _, run_dir = family_suite
    model = str(run_dir / "finetune" / "mnli" / "best")
    settings = ("predict.text_pair_column=text_pair", "predict.pooling=cls", "predict.normalize=true")
    got, manifest = embed(model, PAIRS, tmp_path, *settings)
    check(got, transformers_embeddings(model, PAIRS)["cls", True])
    assert manifest["max_seq_length"] == 32 and manifest["label_names"] == ["contradiction", "entailment", "neutral"]
    norms = [np.linalg.norm(row["embedding"]) for row in got.values()]
    np.testing.assert_allclose(norms, 1.0, atol=1e-6)

    # the onnx backend on the export of its encoder (export onnx --embedding), in onnxruntime
    from pipelines.export.onnx import export_onnx, load_exportable

    export_onnx(load_exportable(model, embedding=True), tmp_path / "encoder.onnx")
    (tmp_path / "onnx").mkdir()
    onnx = ("predict.backend=onnx", f"predict.onnx={tmp_path / 'encoder.onnx'}")
    got, manifest = embed(model, PAIRS, tmp_path / "onnx", *settings, *onnx)
    check(got, transformers_embeddings(model, PAIRS)["cls", True])
    assert manifest["backend"] == "onnx"


@pytest.mark.e2e  # Ray Data's start and its actor, ~30 s: make test-e2e
def test_predict_on_ray_data_embeds_as_in_process(tiny_pretrained, ray_session, tmp_path):
    (tmp_path / "here").mkdir(), (tmp_path / "ray").mkdir()
    here, _ = embed(tiny_pretrained, ROWS, tmp_path / "here")
    on_ray, manifest = embed(tiny_pretrained, ROWS, tmp_path / "ray", "predict.workers=1")
    assert manifest["workers"] == 1
    for i in here:
        np.testing.assert_allclose(on_ray[i]["embedding"], here[i]["embedding"], atol=1e-6)
