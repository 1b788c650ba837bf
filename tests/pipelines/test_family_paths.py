"""Issue #44's parity: for each of the six families, the model the suite fine-tuned (`family_suite`)
gives the same prediction of every eval row on each path that applies it: the finetune stage's
predictions file, `albert-ray predict` (run_predict) over the same rows, `albert-ray serve` over
HTTP (the six models on one deployment, as `albert-ray serve --model NAME=DIR ...` serves them), onnxruntime
on the product's ONNX export, and plain transformers (tests/pipelines/family_paths.py): the same
answer text (QA), the same tags (NER), else the same label and probabilities within 1e-4. And
predict's metrics, recomputed from its output with the official semantics (SQuAD v2.0's evaluate,
conlleval, GLUE's and the families' metrics), equal the finetune stage's on the same rows. Served
multiple choice also answers questions of other numbers of choices, and names a bad one."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config
from pipelines.finetuning.families import FAMILIES
from pipelines.inference.predictor import Predictor
from tests.conftest import free_port

from .family_paths import (
    CUT,
    TASKS,
    call,
    eval_rows,
    finetune_predictions,
    onnx_predictions,
    predict_input,
    served_predictions,
    transformers_predictions,
)
from .family_tasks import swag_rows

pytestmark = pytest.mark.slow

ANSWER = {"question_answering": "answer", "token_classification": "tags"}
INT8_AGREEMENT = 0.9
"""The share of eval rows whose int8 prediction is the fp32 one, at least (measured: docs/model.md#int8)."""
"""The output each family's paths must agree on; the others: prediction and probabilities."""


@pytest.fixture(scope="module")
def served(family_suite):
    """One Serve on a free port with each family's best/ as a model of one deployment (`albert-ray
    serve --model NAME=DIR ...`: Serve's multiplexing, all six loaded on its one replica, of a
    quarter CPU: the session's Ray has four, and predict needs some) at /<family>; its base URL.
    One replica, not an application a family: each replica is a process importing torch and Serve
    (~13 s of CPU on the 2-core VM), and the families' requests and answers are the same code
    (serve.predicted over the family's Predictor) on either deployment; serve.py's single-model
    endpoint is this module's onnx app's and test_serve.py's."""
    from ray import serve

    from pipelines.stages.serve import ServeOptions
    from pipelines.stages.serve_multiplex import multiplex_app
    from pipelines.stages.served_model import read_model

    _, run_dir = family_suite
    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    try:
        folders = {family: str(run_dir / "finetune" / task / "best") for family, task in TASKS.items()}
        models = {family: read_model(folder, None) for family, folder in folders.items()}
        options = ServeOptions(port=port, route="/", cpus_per_replica=0.25, models_per_replica=len(folders))
        serve.run(multiplex_app(folders, models, options, gpus=0.0), name="families", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


def run_predict_on(
    family: str, model: Path, inputs: Path, rows: list[dict], scratch: Path, *settings: str
) -> tuple[dict, dict]:
    """predict's output row of each eval row by id, and its manifest; on Ray Data (one replica)
    unless `settings` say otherwise."""
    from pipelines.stages.predict import run_predict

    path, columns = predict_input(family, inputs, rows, scratch)
    overrides = [f"run_dir={scratch}/run", f"predict.model={model}", f"predict.input={path}"]
    overrides += list(settings) or ["predict.workers=1"]
    out = Path(run_predict(load_config(overrides=[*overrides, *columns])))
    table = pq.read_table(out / "predictions").to_pylist()
    return {str(row["id"]): row for row in table}, json.loads((out / "manifest.json").read_text())


def assert_same(family: str, expected: dict, got: dict, where: str) -> None:
    if family in ANSWER:
        assert got[ANSWER[family]] == expected[ANSWER[family]], where
        return
    if family == "regression":
        assert got["prediction"] == pytest.approx(expected["prediction"], abs=1e-4), where
        assert got["probabilities"] is None, where
        return
    assert got["prediction"] == expected["prediction"], where
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], atol=1e-4, err_msg=where)


@pytest.mark.parametrize("family", list(TASKS))
def test_every_path_gives_the_fine_tuning_predictions_and_its_metric(family, family_suite, served, tmp_path):
    config_file, run_dir = family_suite
    task = run_dir / "finetune" / TASKS[family]
    model, inputs = task / "best", config_file.parent
    rows = eval_rows(family, inputs)
    ids = [row["id"] for row in rows]
    assert len(set(ids)) == len(rows) > 1

    # predict is the reference: every eval row predicted under its id, none rejected; on Ray Data for
    # regression, in process (as the command runs rows this few) for the others, whose Ray Data path
    # test_predict_stage.py and the QA family's test_inference.py take (an actor pool a family: ~5 s each)
    on_ray = family == "regression"
    settings = () if on_ray else ("predict.workers=null",)
    predicted, manifest = run_predict_on(family, model, inputs, rows, tmp_path, *settings)
    assert manifest["workers"] == (1 if on_ray else 0)
    assert manifest["kind"] == family and sorted(predicted) == sorted(ids)
    assert all(predicted[i]["rejected"] is None for i in ids)
    searched = finetune_predictions(family, task)
    assert sorted(searched) == sorted(ids)
    key = ANSWER.get(family, "prediction")
    for i in ids:  # predictions files keep no probabilities; a regression's number, at full precision
        same = searched[i] == (
            pytest.approx(predicted[i][key], abs=1e-4) if family == "regression" else predicted[i][key]
        )
        assert same, (i, searched[i], predicted[i][key])

    fields = FAMILIES[family].load_inference().fields
    status, info = call(f"{served}/{family}")
    assert (status, info["kind"], info["fields"]) == (200, family, list(fields))
    onnx = onnx_predictions(model, rows, tmp_path)
    paths = {
        "serve": served_predictions(f"{served}/{family}", fields, rows),
        "onnxruntime": onnx["fp32"],
        "transformers": transformers_predictions(family, model, rows),
    }
    for name, answers in paths.items():
        assert len(answers) == len(rows), name
        for row, answer in zip(rows, answers):
            if answer != CUT:
                assert_same(family, predicted[row["id"]], answer, f"{name}: {row['id']}")
    cut = [row["id"] for row, answer in zip(rows, paths["transformers"]) if answer == CUT]
    if family == "token_classification":  # those plain transformers would cut are those the family windows
        owners = Predictor.load(str(model), device="cpu").encode(rows).owners
        assert cut == [row["id"] for i, row in enumerate(rows) if owners.count(i) > 1] and len(cut) < len(rows) / 2
    assert family == "token_classification" or not cut

    # int8 (export --quantize int8): the same answer (label, tags, answer text) on most rows
    same = [
        abs(answer[key] - predicted[row["id"]][key]) <= 0.05
        if family == "regression"
        else answer[key] == predicted[row["id"]][key]
        for row, answer in zip(rows, onnx["int8"])
    ]
    assert sum(same) >= INT8_AGREEMENT * len(rows), (family, sum(same), len(rows))

    # the metric predict recomputes from its output equals the one the finetune stage reported
    best = json.loads((task / "best.json").read_text())
    metrics = manifest["metrics"]
    assert metrics["rows"] == len(rows) and metrics[best["metric"]] == pytest.approx(best["value"], abs=1e-6)
    shared = set(metrics) & set(best["metrics"])
    assert best["metric"] in shared
    for name in shared:
        assert metrics[name] == pytest.approx(best["metrics"][name], abs=1e-5), name


def test_a_served_question_of_other_choices_shares_a_batch_and_a_bad_one_is_named(family_suite, served):
    """Multiple choice over HTTP: a question of two choices in one request with the suite's of four,
    a single question as one object, a question of one choice a 400 naming it."""
    config_file, _ = family_suite
    url = f"{served}/multiple_choice"
    questions = [
        {k: r[k] for k in ("question", "context", "choices")} for r in swag_rows(config_file.parent / "swag_val.csv")
    ]
    status, answers = call(url, {"inputs": [*questions[:3], {"question": "The dog", "choices": ["barks.", "moos."]}]})
    assert status == 200 and [len(a["probabilities"]) for a in answers] == [4, 4, 4, 2]
    assert all(a["labels"] is None for a in answers)
    status, answer = call(url, questions[0])
    assert status == 200 and answer["prediction"] == answers[0]["prediction"]
    status, answer = call(url, {"inputs": [questions[0], {**questions[1], "choices": ["only one"]}]})
    assert (status, answer) == (400, {"error": "inputs[1].choices: too_few_choices"})
    status, info = call(url)
    assert (info["max_seq_length"], info["required"]) == (24, ["choices"])


@pytest.mark.e2e  # two exports, a quantization and a Serve app, ~22 s: make test-e2e
def test_predict_and_serve_run_an_onnx_export(family_suite, served, tmp_path):
    """predict.backend=onnx (in the command's process) on the classifier's fp32 export gives the torch
    backend's labels and probabilities within 1e-4; serve --backend onnx (an app beside the six, on
    the same Serve) answers with its int8 export as the Predictor running that file does."""
    from ray import serve

    from pipelines.export.onnx import export_onnx, load_exportable, quantize_export
    from pipelines.stages.serve import ServeOptions, endpoint_app
    from pipelines.stages.served_model import read_model

    config_file, run_dir = family_suite
    family = "classification"
    model, inputs = run_dir / "finetune" / TASKS[family] / "best", config_file.parent
    rows = eval_rows(family, inputs)
    fp32, int8 = tmp_path / "model.onnx", tmp_path / "model.int8.onnx"
    export_onnx(load_exportable(model), fp32)
    quantize_export(fp32, int8)

    in_process = "predict.workers=null"
    torch_rows, _ = run_predict_on(family, model, inputs, rows, tmp_path / "torch", in_process)
    onnx_rows, manifest = run_predict_on(
        family, model, inputs, rows, tmp_path / "onnx", in_process, "predict.backend=onnx", f"predict.onnx={fp32}"
    )
    assert manifest["backend"] == "onnx" and manifest["workers"] == 0 and sorted(onnx_rows) == sorted(torch_rows)
    for i, expected in torch_rows.items():
        assert_same(family, expected, onnx_rows[i], f"predict.backend=onnx: {i}")

    port = int(served.rsplit(":", 1)[1])
    options = ServeOptions(port=port, route="/onnx", cpus_per_replica=0.25, backend="onnx")
    serve.run(
        endpoint_app(str(model), read_model(str(model), None, str(int8)), options, 0.0),
        name="onnx",
        route_prefix="/onnx",
    )
    try:
        status, info = call(f"{served}/onnx")
        assert (status, info["backend"], info["kind"]) == (200, "onnx", family)
        row = {f: rows[0][f] for f in ("text", "text_pair")}
        status, answer = call(f"{served}/onnx", row)
        expected = Predictor.load(str(model), onnx=str(int8)).predict([row])[0]
        assert status == 200 and answer["prediction"] == expected["prediction"]
        np.testing.assert_allclose(answer["probabilities"], expected["probabilities"], atol=1e-6)
    finally:
        serve.delete("onnx")


def test_a_served_fine_tuned_export_embeds_as_transformers(family_suite, served):
    """Issue #46: POST <route>/embed on the suite's MNLI classifier (its head ignored) gives plain
    transformers' AutoModel last hidden state mean-pooled over the attention mask (or at [CLS],
    normalised), text pairs with their segment ids cut at its recorded length, within 1e-5."""
    from .embedding_reference import ROWS, transformers_embeddings

    _, run_dir = family_suite
    rows = ROWS + [{"text": "The team won the final.", "text_pair": "A match was played " * 20}]
    expected = transformers_embeddings(str(run_dir / "finetune" / TASKS["classification"] / "best"), rows)
    for (pooling, normalize), vectors in expected.items():
        status, answer = call(
            f"{served}/classification/embed", {"inputs": rows, "pooling": pooling, "normalize": normalize}
        )
        assert status == 200, answer
        np.testing.assert_allclose(
            [a["embedding"] for a in answer], vectors, atol=1e-5, err_msg=f"{pooling} {normalize}"
        )
    status, info = call(f"{served}/classification")
    assert (status, info["embedding_dimension"]) == (200, 128)
