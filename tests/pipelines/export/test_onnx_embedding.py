"""`albert-ray export onnx MODEL_DIR OUT --embedding` (issue #46): a folder's encoder alone, its one
output `last_hidden_state`, whose mean over the attention mask, read by plain onnxruntime, equals
transformers' `AutoModel`'s within 1e-5; predict's onnx backend embeds with it as transformers does
(and refuses a head's export for embeddings, naming --embedding; an encoder folder's plain export,
with its pooler, embeds as well); its int8 copy keeps the vectors' directions (cosine similarity
>= 0.99). The export of a fine-tuned folder's encoder:
tests/pipelines/test_predict_embedding.py."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pyarrow.parquet as pq
import pytest
from onnx import helper

from pipelines.config import load_config
from pipelines.errors import BadInput

from ..embedding_reference import ROWS, transformers_embeddings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def encoder_export(tiny_pretrained, tmp_path_factory) -> Path:
    """tiny_pretrained's encoder export, written and checked by the command."""
    from pipelines.export.command import main

    out = tmp_path_factory.mktemp("embedding") / "encoder.onnx"
    assert main(["onnx", tiny_pretrained, str(out), "--embedding"]) == 0
    return out


def test_onnxruntime_mean_pooled_equals_transformers(encoder_export, tiny_pretrained, capsys):
    session = onnxruntime.InferenceSession(str(encoder_export), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["last_hidden_state"]
    import transformers

    rows = [row for row in ROWS if "text_pair" not in row]
    batch = transformers.AutoTokenizer.from_pretrained(tiny_pretrained)(
        [row["text"] for row in rows], truncation=True, padding=True, return_tensors="np"
    )
    (hidden,) = session.run(
        None, {name: batch[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
    )
    mask = batch["attention_mask"][..., None].astype(np.float32)
    means = (hidden * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(means, transformers_embeddings(tiny_pretrained, rows)["mean", False], atol=1e-5)


def test_predict_s_onnx_backend_embeds_as_transformers(encoder_export, tiny_pretrained, tmp_path):
    from pipelines.stages.predict import run_predict

    common = [f"predict.model={tiny_pretrained}", f"predict.input={tmp_path}/rows.jsonl", "predict.backend=onnx"]
    common += ["predict.output_kind=embedding", "predict.text_pair_column=text_pair"]
    pairs = [row for row in ROWS if "text_pair" in row]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pairs))
    settings = [f"run_dir={tmp_path}/run", f"predict.onnx={encoder_export}", "predict.pooling=cls"]
    out = Path(run_predict(load_config(overrides=[*common, *settings])))
    got = np.array(pq.read_table(out / "predictions")["embedding"].to_pylist())
    np.testing.assert_allclose(got, transformers_embeddings(tiny_pretrained, pairs)["cls", False], atol=1e-5)
    assert json.loads((out / "manifest.json").read_text())["backend"] == "onnx"


def test_an_encoder_folder_s_plain_export_embeds_too(tiny_pretrained, tmp_path):
    """`export onnx` of a folder without a head (pretrain/hf) writes its encoder with the pooler
    (last_hidden_state, pooler_output): predict and serve embed with it as with --embedding's file
    (it was refused, its message saying the command "writes the head's")."""
    from pipelines.export.command import main
    from pipelines.stages.predict import run_predict
    from pipelines.stages.served_model import read_model

    plain = tmp_path / "encoder-and-pooler.onnx"
    assert main(["onnx", tiny_pretrained, str(plain), "--no-check"]) == 0
    assert [o.name for o in onnx.load(plain).graph.output] == ["last_hidden_state", "pooler_output"]
    rows = [row for row in ROWS if "text_pair" not in row]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = [f"run_dir={tmp_path}/run", f"predict.model={tiny_pretrained}", f"predict.input={tmp_path}/rows.jsonl"]
    overrides += ["predict.output_kind=embedding", "predict.backend=onnx", f"predict.onnx={plain}"]
    out = Path(run_predict(load_config(overrides=overrides)))
    got = np.array(pq.read_table(out / "predictions")["embedding"].to_pylist())
    np.testing.assert_allclose(got, transformers_embeddings(tiny_pretrained, rows)["mean", False], atol=1e-5)
    served = read_model(tiny_pretrained, None, str(plain))
    assert (served.predicts, served.embeds) == (False, True)


def test_a_head_s_export_is_refused_for_embeddings_naming_the_encoder_export(classifier, tmp_path):
    from pipelines.stages.predict import run_predict
    from pipelines.storage.models import USAGE_KEYS

    # a graph with the classifier's metadata and a head's output: what `export onnx` (no --embedding) writes
    config = json.loads((Path(classifier) / "config.json").read_text())
    graph = helper.make_graph([], "head", [], [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    helper.set_model_props(model, {k: json.dumps(config[k], sort_keys=True) for k in USAGE_KEYS if k in config})
    onnx.save(model, tmp_path / "head.onnx")
    (tmp_path / "rows.csv").write_text("text\nhello\n")
    overrides = [f"run_dir={tmp_path}/run", f"predict.model={classifier}", f"predict.input={tmp_path}/rows.csv"]
    overrides += ["predict.output_kind=embedding", "predict.backend=onnx", f"predict.onnx={tmp_path}/head.onnx"]
    with pytest.raises(
        BadInput,
        match=r"outputs \['logits'\], where \['last_hidden_state'\] are needed .* with --embedding, the encoder's",
    ):
        run_predict(load_config(overrides=overrides))
    assert not (tmp_path / "run" / "predict").exists()


def test_the_int8_encoder_export_keeps_the_sentence_vectors_directions(encoder_export, tiny_pretrained, tmp_path):
    from pipelines.export.embedding_check import embedding_similarity
    from pipelines.export.onnx import load_exportable, quantize_export
    from pipelines.inference.embedding import Embedder

    int8 = tmp_path / "encoder.int8.onnx"
    quantized = quantize_export(encoder_export, int8)
    assert quantized.matrices > 0 and int8.stat().st_size <= 0.35 * encoder_export.stat().st_size
    assert embedding_similarity(load_exportable(tiny_pretrained, embedding=True), int8) >= 0.99
    embedder = Embedder.load(tiny_pretrained, onnx=str(int8), normalize=True)
    got = np.array([out["embedding"] for out in embedder.run(ROWS)[0]])
    expected = transformers_embeddings(tiny_pretrained, ROWS)["mean", True]
    assert (got * expected).sum(axis=1).min() >= 0.99


@pytest.mark.e2e  # a second trace of the model, ~15 s, as test_quantize.py's command tests: make test-e2e
def test_the_command_writes_and_checks_an_int8_encoder_export(tiny_pretrained, tmp_path, capsys):
    from pipelines.export.command import main

    assert (
        main(["onnx", tiny_pretrained, str(tmp_path / "encoder.int8.onnx"), "--embedding", "--quantize", "int8"]) == 0
    )
    out = capsys.readouterr().out
    assert "(AlbertForPreTraining's encoder, opset 20, int8: 7 matrices, 3 tables)" in out
    similarity = float(out.split("least cosine similarity of sentence vectors to PyTorch's (int8): ")[1].split()[0])
    assert 0.99 <= similarity <= 1.0
