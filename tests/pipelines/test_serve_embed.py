"""serve's POST {route}/embed (issue #46) over real HTTP: a pretraining export served for sentence
vectors alone (its POST {route} a 404 saying it has no task head, GET saying the vectors' dimension),
a fine-tuned export serving both, and an ONNX export of the encoder on the onnx backend; each vector
equal within 1e-5 to plain transformers' `AutoModel` last hidden state mean-pooled over the attention
mask (or read at [CLS], L2-normalised on request), for a row, a list and text pairs; a malformed
request is a 400 naming the field. Starts Serve (tens of seconds): e2e. The suite's fine-tuned
exports, served, embed alike: test_family_paths.py."""

import numpy as np
import pytest

from pipelines.stages.serve_embed import NO_HEAD
from tests.conftest import free_port

from .embedding_reference import ROWS, transformers_embeddings
from .test_serve import call

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served_encoders(ray_session, tiny_pretrained, classifier_module, tmp_path_factory):
    """tiny_pretrained at /encoder (torch) and /onnx (its --embedding export), a random classifier at
    /classifier, on one Serve on a free port; the base URL."""
    from ray import serve
    from ray.serve import RunTarget

    from pipelines.export.onnx import export_onnx, load_exportable
    from pipelines.stages.serve import ServeOptions, endpoint_app
    from pipelines.stages.served_model import read_model

    encoder = tmp_path_factory.mktemp("onnx") / "encoder.onnx"
    export_onnx(load_exportable(tiny_pretrained, embedding=True), encoder)
    port = free_port()
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port})
    try:
        targets = []
        for route, model, onnx in (
            ("/encoder", tiny_pretrained, None),
            ("/onnx", tiny_pretrained, str(encoder)),
            ("/classifier", classifier_module, None),
        ):
            backend = "onnx" if onnx else "torch"
            options = ServeOptions(port=port, route=route, cpus_per_replica=0.25, backend=backend)
            app = endpoint_app(model, read_model(model, None, onnx), options, gpus=0.0)
            targets.append(RunTarget(app, name=route[1:], route_prefix=route))
        serve.run_many(targets)
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


@pytest.fixture(scope="module")
def classifier_module(tiny_pretrained, tmp_path_factory) -> str:
    from .served_classifier import save_classifier

    return save_classifier(tiny_pretrained, tmp_path_factory.mktemp("classifier") / "classifier")


def embeddings(url: str, rows: list[dict], **options) -> np.ndarray:
    status, answer = call(f"{url}/embed", {"inputs": rows, **options})
    assert status == 200, answer
    return np.array([a["embedding"] for a in answer])


@pytest.mark.parametrize("route", ["encoder", "onnx", "classifier"])
def test_embed_answers_transformers_vectors(served_encoders, route, tiny_pretrained, classifier_module):
    url = f"{served_encoders}/{route}"
    expected = transformers_embeddings(classifier_module if route == "classifier" else tiny_pretrained, ROWS)
    status, one = call(f"{url}/embed", ROWS[0])
    assert status == 200 and set(one) == {"embedding"}
    np.testing.assert_allclose(one["embedding"], expected["mean", False][0], atol=1e-5)
    for (pooling, normalize), vectors in expected.items():
        got = embeddings(url, ROWS, pooling=pooling, normalize=normalize)
        np.testing.assert_allclose(got, vectors, atol=1e-5, err_msg=f"{route} {pooling} {normalize}")

    status, info = call(url)
    assert status == 200 and info["embedding_dimension"] == 128
    status, answer = call(url, {"text": "Oil prices fell."})
    if route == "classifier":
        assert status == 200 and info["kind"] == "classification" and len(answer["probabilities"]) == 3
    else:
        assert (status, info["kind"], info["outputs"], info["fields"]) == (404, None, [], ["text", "text_pair"])
        assert answer["error"] == f"{tiny_pretrained} {NO_HEAD}" and "has no task head" in NO_HEAD


def test_a_malformed_embed_request_is_a_400_naming_the_field(served_encoders):
    url = f"{served_encoders}/encoder/embed"
    refused = {
        'pooling: one of mean, cls is expected, got "max"': {"text": "a", "pooling": "max"},
        "normalize: a boolean is expected, got a number": {"inputs": [{"text": "a"}], "normalize": 1},
        "inputs[1].text: missing": {"inputs": [{"text": "a"}, {"text_pair": "b"}]},
        "label: unknown field (the fields are text, text_pair)": {"text": "a", "label": "x"},
    }
    for message, body in refused.items():
        assert call(url, body) == (400, {"error": message})
    status, answer = call(url)  # a GET
    assert status == 405 and answer["error"] == "method: GET is not served on /embed (POST)"
    assert call(url, {"text": "still serving"})[0] == 200


def test_a_path_under_the_route_that_is_none_of_its_routes_is_a_404(served_encoders):
    url = f"{served_encoders}/classifier"
    for path in ("/embd", "/embed/x", "/health/x", "/foo"):
        for body in (None, ROWS[0]):
            status, answer = call(url + path, body)
            expected = f"path: /classifier{path} is not served (/classifier, /classifier/embed, /classifier/health)"
            assert (status, answer) == (404, {"error": expected}), (path, body)
    assert call(f"{url}/health") == (200, {"status": "ok", "ongoing": 0})
    assert call(f"{url}/embed/", ROWS[0])[0] == 200  # a trailing slash is the same route
