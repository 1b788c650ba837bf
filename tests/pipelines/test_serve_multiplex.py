"""Several models on one deployment (`albert-ray serve --models DIR`, pipelines/stages/serve_multiplex.py):
five random models of three families (served_models.py) and an encoder without a head behind one
replica that holds two at a time, called over real HTTP while the command waits for Ctrl-C. Each
request is answered by its own model (equal to that model's Predictor; sentence vectors to its
Embedder's, the encoder's and a classifier's), by path or by Serve's header; A, B, C, A shows A evicted and
loaded again, never more than two loaded; rows of one model from concurrent callers share batches;
unknown names and contradicting routes are refused. The six families' models of the shared suite on
one deployment each answer as their Predictor; with --backend onnx each model runs its own export.
An evicted model's folder is removed (without Serve)."""

import json
import os
import shutil
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from types import SimpleNamespace

import pytest
import ray

from pipelines.inference.embedding import Embedder
from pipelines.inference.predictor import Predictor
from pipelines.stages.serve_multiplex import MODEL_HEADER, LoadedModel, MultiplexEndpoint
from tests.conftest import free_port

from .family_paths import TASKS, eval_rows, served_predictions
from .served_models import CLASSIFIERS, NAMES, save_models

TEXTS = ["Shares rose after the bank reported strong profits.", "The team won the final in the last minute."]
QUESTION = {"question": "The dog", "choices": ["barks at the postman.", "moos.", "reads the paper."]}


def call(url: str, body: dict | None = None, headers: dict[str, str] | None = None) -> tuple[int, object]:
    """(status, JSON answer) of a POST (with a body) or a GET."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def rows_for(name: str) -> list[dict]:
    return [QUESTION] if name == "choose" else [{"text": text} for text in TEXTS]


def assert_answers(name: str, answers: list[dict], expected: list[dict]) -> None:
    """The model's own answers: its labels, its prediction and probabilities (to 1e-6)."""
    assert len(answers) == len(expected), (name, answers)
    for answer, own in zip(answers, expected):
        assert answer["labels"] == CLASSIFIERS.get(name), (name, answer)
        if name == "score":
            assert answer["prediction"] == pytest.approx(own["prediction"], abs=1e-6)
            assert answer["probabilities"] is None
            continue
        assert answer["prediction"] == own["prediction"], (name, answer, own)
        assert answer["probabilities"] == pytest.approx(own["probabilities"], abs=1e-6), name


@pytest.mark.e2e  # the command's own Serve and five model loads, ~40 s: make test-e2e
def test_five_models_on_one_replica_holding_two_each_answer_as_their_own_and_are_evicted_lru(
    ray_session, tiny_pretrained, tmp_path, monkeypatch, capsys
):
    from ray import serve

    from pipelines.cli import serve as command
    from pipelines.cli.command import main

    folders = save_models(tiny_pretrained, tmp_path / "models")
    shutil.copytree(tiny_pretrained, tmp_path / "models" / "encoder")  # the pretrain stage's hf/: no task head
    folders = {**folders, "encoder": str(tmp_path / "models" / "encoder")}
    expected = {name: Predictor.load(folders[name], None, device="cpu").predict(rows_for(name)) for name in NAMES}
    pairs = [{"text": TEXTS[0]}, {"text": TEXTS[1], "text_pair": TEXTS[0]}]
    vectors = {  # every pooling of each row, as predict's embeddings give them
        name: Embedder.load(folders[name], None, device="cpu").vectors(pairs) for name in ("encoder", "news")
    }
    # the models tell each other apart: no two classifiers answer alike
    assert len({json.dumps(expected[name][0]["probabilities"]) for name in CLASSIFIERS}) == len(CLASSIFIERS)
    port = free_port()
    url = f"http://127.0.0.1:{port}/models"

    def ask(name: str) -> None:
        """POST the model's rows by its path; its own answers."""
        status, answers = call(f"{url}/{name}", {"inputs": rows_for(name)})
        assert status == 200, (name, answers)
        assert_answers(name, answers, expected[name])

    def loaded() -> tuple[list[str], dict[str, int]]:
        status, listing = call(url)
        assert status == 200 and len(listing["loaded"]) <= 2, listing
        return listing["loaded"], listing["loads"]

    def serving(seconds: float) -> None:  # the command's wait: the checks while it serves, then Ctrl-C
        status, listing = call(url)
        assert status == 200
        assert listing == {"models": dict(sorted(folders.items())), "models_per_replica": 2, "loaded": [], "loads": {}}

        a, b, c = "news", "sentiment", "choose"
        for name, now, loads in [
            (a, [a], {a: 1}),
            (b, [a, b], {a: 1, b: 1}),
            (c, [b, c], {a: 1, b: 1, c: 1}),  # A, least recently used, evicted
            (a, [a, c], {a: 2, b: 1, c: 1}),  # A loaded again, B evicted
        ]:
            ask(name)
            assert loaded() == (sorted(now), loads), name

        for name in NAMES:  # every model in turn, through two slots
            ask(name)
            assert name in loaded()[0]
        # sentence vectors: an encoder without a head, and a classifier's own encoder, by path or header
        for name, route, headers in [("encoder", "/encoder/embed", {}), ("news", "/embed", {MODEL_HEADER: "news"})]:
            status, answers = call(f"{url}{route}", {"inputs": pairs, "pooling": "cls"}, headers)
            assert status == 200, answers
            for answer, own in zip(answers, vectors[name]):
                assert answer["embedding"] == pytest.approx(own[1].tolist(), abs=1e-5), name  # cls: pooled[1]
        status, answer = call(f"{url}/encoder/embed", {"text": TEXTS[0]})
        assert status == 200 and answer["embedding"] == pytest.approx(vectors["encoder"][0][0].tolist(), abs=1e-5)
        status, answer = call(f"{url}/encoder", {"text": TEXTS[0]})
        assert status == 404 and answer["error"].startswith(f"model 'encoder': {folders['encoder']} has no task head")
        assert call(f"{url}/encoder/embed")[0] == 405
        # by Serve's header on the route, one row alone
        status, answer = call(url, {"text": TEXTS[0]}, {MODEL_HEADER: "topics.v2"})
        assert status == 200
        assert_answers("topics.v2", [answer], expected["topics.v2"][:1])

        # concurrent callers of one model share its batches; the other model's rows run apart
        _, before = call(f"{url}/news")
        with ThreadPoolExecutor(6) as pool:
            asked = [("news", i % 2) for i in range(4)] + [("score", 0), ("score", 1)]
            answers = list(pool.map(lambda job: (job, call(f"{url}/{job[0]}", {"text": TEXTS[job[1]]})), asked))
        for (name, i), (status, answer) in answers:
            assert status == 200
            assert_answers(name, [answer], expected[name][i : i + 1])
        _, after = call(f"{url}/news")
        served = {k: after["served"][k] - before["served"][k] for k in ("batches", "rows")}
        assert served["rows"] == 4 and served["batches"] < 4, served
        assert (after["name"], after["kind"], after["labels"]) == ("news", "classification", CLASSIFIERS["news"])

        for route, body, headers, status, message in [
            ("/nobody", {"text": "x"}, {}, 404, "model: 'nobody' is not served here (models: "),
            ("/nobody", None, {}, 404, "model: 'nobody' is not served here (models: "),
            ("", {"text": "x"}, {}, 400, "model: name one, as /models/<name> or the serve_multiplexed_model_id header"),
            ("/news", {"text": "x"}, {MODEL_HEADER: "score"}, 400, "model: the path names 'news', the "),
            ("/news/extra", {"text": "x"}, {}, 404, "path: /models/news/extra is not served"),
            ("/news", {"txt": "typo"}, {}, 400, "txt: unknown field"),
            ("/choose", {"text": "x"}, {}, 400, "text: unknown field"),
        ]:
            got, answer = call(f"{url}{route}", body, headers)
            assert got == status and answer["error"].startswith(message), (route, answer)
        assert call(f"{url}/health") == (200, {"status": "ok", "ongoing": 0})
        ask("score")  # the replica serves on
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "time", SimpleNamespace(sleep=serving))
    argv = ["--models", str(tmp_path / "models"), "--models-per-replica", "2", "--route", "/models"]
    # a long batch wait, so that callers arriving together surely share a batch
    try:
        capsys.readouterr()
        assert main(["serve", *argv, "--port", str(port), "--batch-wait-ms", "300"]) == 0
        out = capsys.readouterr().out
        # Serve's proxy takes requests to several models: one core is left to it (--threads-per-replica auto)
        threads = max(1, min(int(ray.cluster_resources()["CPU"]), len(os.sched_getaffinity(0))) - 1)
        head = f"serving 6 models at {url}/<name> (up to 2 loaded per replica, each on first use; {threads} thread"
        assert out.startswith(head + f"{'s' * (threads != 1)} a replica):\n")
        assert f"  encoder: {folders['encoder']} (an encoder without a task head: sentence vectors only; " in out
        assert f"  curl -s {url}/choose/embed -d " in out
        assert f"  news: {folders['news']} (classification: business, politics, sport; 512 tokens)\n" in out
        assert f"  curl -s {url}/choose -H 'Content-Type: application/json'" in out and out.endswith("stopped\n")
        assert serve.status().applications == {}
    finally:
        serve.shutdown()  # a no-op when the command shut down; the session's Ray serves the other tests


def assert_close(got, expected, where: str) -> None:
    """`got` (JSON) equals `expected` (a Predictor's output), numbers within 1e-5, at every depth."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert_close(got[key], value, f"{where}.{key}")
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, f"{where}[{i}]")
    elif isinstance(expected, float):
        assert got == pytest.approx(expected, abs=1e-5), where
    else:
        assert got == expected, where


@pytest.mark.e2e  # the suite's six models through the command's own Serve, ~50 s: make test-e2e
def test_every_family_on_one_deployment_answers_as_its_predictor(family_suite, monkeypatch):
    from ray import serve

    from pipelines.cli import serve as command
    from pipelines.cli.command import main
    from pipelines.finetuning.families import FAMILIES

    config_file, run_dir = family_suite
    folders = {family: str(run_dir / "finetune" / task / "best") for family, task in TASKS.items()}
    port = free_port()
    url = f"http://127.0.0.1:{port}/predict"

    def serving(seconds: float) -> None:
        for family, folder in folders.items():  # six models through two slots
            fields = FAMILIES[family].load_inference().fields
            rows = eval_rows(family, config_file.parent)[:12]
            answers = served_predictions(f"{url}/{family}", fields, rows)
            requests = [{f: row[f] for f in fields if f in row} for row in rows]
            assert_close(answers, Predictor.load(folder, device="cpu").predict(requests), family)
        _, listing = call(url)
        assert listing["loads"] == dict.fromkeys(folders, 1) and listing["loaded"] == sorted(list(folders)[-2:])
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "time", SimpleNamespace(sleep=serving))
    argv = [f"--model={family}={folder}" for family, folder in folders.items()]
    try:
        assert main(["serve", *argv, "--models-per-replica", "2", "--port", str(port)]) == 0
    finally:
        serve.shutdown()


@pytest.mark.e2e  # three exports and the command's own Serve, ~35 s: make test-e2e
def test_several_models_run_their_onnx_exports_each_answering_as_its_file(
    ray_session, tiny_pretrained, tmp_path, monkeypatch, capsys
):
    """--backend onnx with several models (--onnx NAME=FILE each) on a replica holding two: a
    classifier's fp32 export, a regression's int8 export and an encoder's --embedding export, each
    answering as a Predictor (or Embedder) running that file does, through eviction and reload; a
    head's export answers no embeddings (404), an encoder's no predictions."""
    from ray import serve

    from pipelines.cli import serve as command
    from pipelines.cli.command import main
    from pipelines.export.onnx import export_onnx, load_exportable, quantize_export
    from pipelines.stages.serve_embed import NO_EMBEDDING

    folders = save_models(tiny_pretrained, tmp_path / "models")
    folders = {"news": folders["news"], "score": folders["score"], "encoder": tiny_pretrained}
    files = {name: tmp_path / f"{name}.onnx" for name in folders}
    export_onnx(load_exportable(folders["news"]), files["news"])
    export_onnx(load_exportable(folders["score"]), tmp_path / "score.fp32.onnx")
    quantize_export(tmp_path / "score.fp32.onnx", files["score"])
    export_onnx(load_exportable(folders["encoder"], embedding=True), files["encoder"])
    expected = {
        name: Predictor.load(folders[name], None, onnx=str(files[name])).predict(rows_for(name))
        for name in ("news", "score")
    }
    vectors = Embedder.load(folders["encoder"], None, onnx=str(files["encoder"])).vectors([{"text": TEXTS[0]}])
    port = free_port()
    url = f"http://127.0.0.1:{port}/predict"

    def serving(seconds: float) -> None:
        for name in ("news", "score", "encoder", "news"):  # the last: news evicted by the encoder, loaded again
            if name == "encoder":
                status, answer = call(f"{url}/encoder/embed", {"text": TEXTS[0]})
                assert status == 200 and answer["embedding"] == pytest.approx(vectors[0][0].tolist(), abs=1e-5)
                status, answer = call(f"{url}/encoder", {"text": TEXTS[0]})
                assert status == 404 and "has no task head served" in answer["error"], answer
                continue
            status, answers = call(f"{url}/{name}", {"inputs": rows_for(name)})
            assert status == 200, answers
            assert_answers(name, answers, expected[name])
        status, answer = call(f"{url}/news/embed", {"text": TEXTS[0]})
        assert (status, answer) == (404, {"error": f"model 'news': {NO_EMBEDDING}"})
        status, info = call(f"{url}/score")
        assert status == 200 and (info["backend"], info["kind"]) == ("onnx", "regression"), info
        _, listing = call(url)
        # GET score loaded it again (the encoder, least recently used, evicted)
        assert (listing["loads"], listing["loaded"]) == ({"news": 2, "score": 2, "encoder": 1}, ["news", "score"])
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "time", SimpleNamespace(sleep=serving))
    argv = [
        arg for name, folder in folders.items() for arg in (f"--model={name}={folder}", f"--onnx={name}={files[name]}")
    ]
    try:
        capsys.readouterr()
        assert main(["serve", *argv, "--backend", "onnx", "--models-per-replica", "2", "--port", str(port)]) == 0
        out = capsys.readouterr().out
        assert f"  score: {folders['score']} (regression; 512 tokens; onnxruntime on {files['score']})\n" in out
        assert f"  encoder: {folders['encoder']} (an encoder without a task head: sentence vectors only; " in out
        assert f"  curl -s {url}/news -H " in out and f"  curl -s {url}/encoder/embed -d " in out
    finally:
        serve.shutdown()


def test_an_evicted_model_leaves_no_folder_and_is_no_longer_counted_loaded(tmp_path):
    """Serve's multiplexer calls an evicted model's __del__, the garbage collector later again; a
    later load of the same name stays loaded when the earlier one goes."""
    release = MultiplexEndpoint.func_or_class.release
    replica = SimpleNamespace(loaded={})
    works = [tmp_path / "first", tmp_path / "again"]
    for work in works:
        work.mkdir()
        (work / "config.json").write_text("{}")
    first, again = (LoadedModel("news", None, None, str(w), {}, partial(release, replica)) for w in works)
    replica.loaded["news"] = first
    first.__del__()  # evicted
    assert not works[0].exists() and replica.loaded == {}
    replica.loaded["news"] = again
    first.__del__()  # collected
    assert replica.loaded == {"news": again} and works[1].exists()
