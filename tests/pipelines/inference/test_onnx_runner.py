"""The onnx backend's runner (pipelines/inference/onnx_runner.py) as predict meets it: a missing
predict.onnx, or an ONNX file that is not an export of predict.model, is refused by name before any
row is read or Ray starts. Running the exports of every family: tests/pipelines/test_family_paths.py;
serve's refusals: test_serve.py."""

import onnx
import pytest
from onnx import helper

from albert_model import AlbertConfig, AlbertForSequenceClassification
from albert_model.hf import save_hf_pretrained
from pipelines.config import load_config
from pipelines.errors import BadInput, MissingInput
from tests.conftest import VOCAB_SIZE


def test_an_onnx_file_that_is_missing_or_of_another_model_is_refused_before_ray(tiny_pretrained, tmp_path):
    """predict.backend=onnx: a missing predict.onnx, or an ONNX file whose metadata is not
    predict.model's, is refused by name before any row is read or Ray starts; nothing is written."""
    from pipelines.stages.predict import run_predict

    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE).replace(num_labels=2)
    folder = save_hf_pretrained(
        AlbertForSequenceClassification(config),
        tmp_path / "model",
        spiece_model=f"{tiny_pretrained}/spiece.model",
        id2label={0: "no", 1: "yes"},
    )
    (tmp_path / "rows.csv").write_text("text\nhello\n")
    file = tmp_path / "model.onnx"

    def predict() -> None:
        run_predict(
            load_config(
                overrides=[f"run_dir={tmp_path}/run", f"predict.model={folder}", f"predict.input={tmp_path}/rows.csv"]
                + ["predict.backend=onnx", f"predict.onnx={file}"]
            )
        )

    with pytest.raises(MissingInput, match=f"predict.onnx: {file} does not exist"):
        predict()
    graph = helper.make_graph([], "other", [], [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(graph), file)  # no id2label: not an export of this folder
    with pytest.raises(BadInput, match=f"predict.onnx {file}: not an export of {folder}: its id2label differ"):
        predict()
    assert not (tmp_path / "run" / "predict").exists()


def test_early_exit_with_the_onnx_backend_is_refused_by_the_config(tmp_path):
    """Early exit runs the torch model's depths one by one; an ONNX graph runs them all: the pair is a
    config error naming predict.backend, before any model is read."""
    from pipelines.errors import ConfigError

    common = [f"run_dir={tmp_path}", "predict.backend=onnx", f"predict.onnx={tmp_path}/model.onnx"]
    for exits in ("predict.exit_patience=2", "predict.exit_entropy=0.3"):
        with pytest.raises(ConfigError, match="predict.backend.*must be torch with predict.exit_patience"):
            load_config(overrides=[*common, exits])
    load_config(overrides=common)  # either alone is a config


def test_the_runner_leaves_out_onnxruntime_s_slower_layer_norm_fusion(tmp_path):
    """onnxruntime fuses a residual Add and its LayerNormalization into SkipLayerNormalization, whose CPU
    kernel (1.32) is several times slower than the two (docs/BENCHMARKS.md#int8-on-cpu): the runner's session,
    as onnxruntime optimizes it, keeps them apart, where onnxruntime's default options fuse them."""
    import collections

    import numpy as np
    import onnxruntime
    from onnx import numpy_helper

    from pipelines.inference.onnx_runner import OnnxRunner

    hidden = 8
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", "sequence", hidden])
    nodes = [
        helper.make_node("Add", ["x", "x"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["logits"], axis=-1),
    ]
    norm = [numpy_helper.from_array(np.full(hidden, v, np.float32), name) for name, v in (("gamma", 1), ("beta", 0))]
    logits = helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "residual_norm", [x], [logits], norm), opset_imports=[helper.make_opsetid("", 20)]
    )
    onnx.save(model, tmp_path / "model.onnx")

    def optimized(options: onnxruntime.SessionOptions) -> collections.Counter:
        options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), options, providers=["CPUExecutionProvider"])
        return collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)

    assert optimized(onnxruntime.SessionOptions())["SkipLayerNormalization"] == 1
    runner = OnnxRunner(str(tmp_path / "model.onnx"), ("logits",), threads=1)
    ops = optimized(runner.session.get_session_options())
    assert ops["SkipLayerNormalization"] == 0 and ops["LayerNormalization"] == 1 and ops["Add"] == 1
