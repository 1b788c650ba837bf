"""The models of a multiplexed `albert-ray serve` (pipelines/cli/serve_models.py and the command's
checks): `--model NAME=DIR` and `--models DIR` parsed, names URL-safe and unique, and every refusal
one line and exit status 2 before Ray or Serve starts, a broken model folder among good ones included.
Serving them: test_serve_multiplex.py."""

import pytest

from pipelines.cli.serve_models import model_flag, named_models
from pipelines.errors import BadInput, MissingInput
from tests.pickled_weights import pickled_model_dir


def refused(capsys, *argv: str) -> str:
    """The command's one-line error for `argv`, after its exit status 2 and nothing printed."""
    from pipelines.cli.command import main

    assert main(["serve", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and not captured.out, captured
    return captured.err.removeprefix("albert-ray serve: error: ").rstrip("\n")


def test_a_model_flag_is_a_name_then_its_folder():
    assert model_flag("news=runs/a/finetune/best") == ("news", "runs/a/finetune/best")
    assert model_flag("v1.2_x-y=s3://bucket/m=1") == ("v1.2_x-y", "s3://bucket/m=1")  # the first = splits


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("runs/best", "--model runs/best: NAME=DIR is expected (a name for the URL, then the model folder)"),
        ("news=", "--model news=: NAME=DIR is expected (a name for the URL, then the model folder)"),
        ("=runs/best", "--model =runs/best: model name '' is not URL-safe"),
        ("a/b=runs/best", "--model a/b=runs/best: model name 'a/b' is not URL-safe"),
        ("..=runs/best", "--model ..=runs/best: model name '..' is not URL-safe"),
        ("my model=runs/best", "--model my model=runs/best: model name 'my model' is not URL-safe"),
        ("caf\u00e9=runs/best", "--model caf\u00e9=runs/best: model name 'caf\u00e9' is not URL-safe"),
        (f"{'n' * 65}=runs/best", f"--model {'n' * 65}=runs/best: model name '{'n' * 65}' is not URL-safe"),
        ("health=runs/best", "--model health=runs/best: model name 'health' is taken by the endpoint's <route>/health"),
        ("embed=runs/best", "--model embed=runs/best: model name 'embed' is taken by the endpoint's <route>/embed"),
    ],
)
def test_a_bad_model_flag_is_one_line_naming_it_before_anything_is_read(capsys, flag, message):
    with pytest.raises(BadInput) as raised:
        model_flag(flag)
    assert str(raised.value).startswith(message)
    assert refused(capsys, "--model", flag).startswith(message)


def test_models_dir_names_each_sub_folder_holding_a_model(tmp_path):
    for name in ("b", "a", "notes"):
        (tmp_path / "models" / name).mkdir(parents=True)
    for name in ("a", "b"):
        (tmp_path / "models" / name / "config.json").write_text("{}")
    (tmp_path / "models" / "README.md").write_text("not a model")
    root = tmp_path / "models"
    assert named_models(["z=elsewhere"], [str(root)]) == {"z": "elsewhere", "a": f"{root}/a", "b": f"{root}/b"}


def test_a_models_dir_without_models_or_with_a_bad_name_is_one_line(tmp_path, capsys):
    (tmp_path / "empty" / "notes").mkdir(parents=True)
    with pytest.raises(MissingInput, match="has no sub-folder holding a model"):
        named_models([], [str(tmp_path / "empty")])
    assert refused(capsys, "--models", str(tmp_path / "empty")) == (
        f"--models: {tmp_path / 'empty'} has no sub-folder holding a model (a config.json)"
    )
    assert refused(capsys, "--models", str(tmp_path / "nothing")) == f"--models: {tmp_path / 'nothing'} does not exist"
    (tmp_path / "named" / "my model").mkdir(parents=True)
    (tmp_path / "named" / "my model" / "config.json").write_text("{}")
    assert refused(capsys, "--models", str(tmp_path / "named")).startswith(
        f"--models {tmp_path / 'named'}: model name 'my model' is not URL-safe"
    )


def test_a_name_given_twice_is_one_line_naming_both_folders(tmp_path, capsys):
    (tmp_path / "models" / "news").mkdir(parents=True)
    (tmp_path / "models" / "news" / "config.json").write_text("{}")
    assert refused(capsys, "--model", "news=x", "--model", "news=y") == "model name 'news': given twice (x and y)"
    assert refused(capsys, "--model", "news=x", "--models", str(tmp_path / "models")) == (
        f"model name 'news': given twice (x and {tmp_path / 'models' / 'news'})"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "MODEL_DIR: give the model to serve (or several: --model NAME=DIR, --models DIR)"),
        (["one", "--model", "a=x"], "MODEL_DIR one: one model, served alone; not with --model (several, by name)"),
        (["one", "--models", "x"], "MODEL_DIR one: one model, served alone; not with --models (several, by name)"),
        (["one", "--models-per-replica", "2"], "--models-per-replica 2: only with several models (--model/--models)"),
        (
            ["one", "--backend", "onnx", "--onnx", "a.onnx", "--onnx", "b.onnx"],
            "--onnx b.onnx: one model (MODEL_DIR) runs one --onnx FILE",
        ),
        (
            ["--model", "a=x", "--onnx", "a=x.onnx"],
            "--backend onnx runs an ONNX file: give it as --onnx FILE (and --onnx only with it)",
        ),
        (
            ["--model", "a=x", "--backend", "onnx", "--onnx", "x.onnx"],
            "--onnx x.onnx: NAME=FILE is expected with several models (a model's name, its export)",
        ),
        (
            ["--model", "a=x", "--model", "b=y", "--backend", "onnx", "--onnx", "a=x.onnx"],
            "--backend onnx: model 'b' "
            "has no --onnx b=FILE (every model runs its own export: `albert-ray export onnx y FILE [--quantize int8]`)",
        ),
        (
            ["--model", "a=x", "--backend", "onnx", "--onnx", "a=1.onnx", "--onnx", "a=2.onnx"],
            "--onnx a=2.onnx: model 'a' has its --onnx already (1.onnx)",
        ),
        (
            ["--model", "a=x", "--backend", "onnx", "--onnx", "b=1.onnx"],
            "--onnx b=1.onnx: no model is named 'b' (models: a)",
        ),
    ],
)
def test_one_model_or_several_flags_that_contradict_are_one_line(capsys, argv, message):
    assert refused(capsys, *argv) == message


def test_a_cap_below_one_is_refused_by_the_parser(capsys):
    from pipelines.cli.command import main

    with pytest.raises(SystemExit) as exited:
        main(["serve", "--model", "a=x", "--models-per-replica", "0"])
    assert exited.value.code == 2
    assert "argument --models-per-replica: 0: must be above 0" in capsys.readouterr().err


def test_every_model_folder_is_checked_before_ray_starts(classifier, tmp_path, monkeypatch, capsys):
    """A missing folder and a pickled pytorch_model.bin, each beside a good model: one line naming the
    model, and Ray never started (an encoder without a task head is served: it embeds)."""
    from pipelines.cli import serve as command

    monkeypatch.setattr(command, "init_ray", lambda: pytest.fail("Ray started before every folder was checked"))
    good = f"good={classifier}"
    assert refused(capsys, "--model", good, "--model", f"gone={tmp_path / 'nothing'}") == (
        f"model gone: {tmp_path / 'nothing'} does not exist"
    )
    pickled = pickled_model_dir(classifier, tmp_path / "pickled", tmp_path / "sentinel")
    assert refused(capsys, "--model", good, "--model", f"bad={pickled}").startswith(
        f"model bad: {pickled}/pytorch_model.bin: not loaded: it holds "
    )
    assert not (tmp_path / "sentinel").exists()


def test_every_models_onnx_export_is_checked_before_ray_starts(classifier, tmp_path, monkeypatch, capsys):
    """--backend onnx with several models: each model's --onnx NAME=FILE read and checked against its
    own folder before Ray starts, a failure one line naming the model."""
    import onnx
    from onnx import helper

    from pipelines.cli import serve as command

    monkeypatch.setattr(command, "init_ray", lambda: pytest.fail("Ray started before every export was checked"))
    other = helper.make_model(helper.make_graph([], "other", [], []))
    helper.set_model_props(other, {"id2label": '{"0": "x"}'})
    onnx.save(other, tmp_path / "other.onnx")
    models = ["--backend", "onnx", "--model", f"a={classifier}", "--model", f"b={classifier}"]
    gone = tmp_path / "gone.onnx"
    assert refused(capsys, *models, "--onnx", f"a={gone}", "--onnx", f"b={gone}") == (
        f"model a --onnx: {gone} does not exist (write it with `albert-ray export onnx {classifier} {gone}`)"
    )
    assert refused(capsys, *models, "--onnx", f"a={tmp_path / 'other.onnx'}", "--onnx", f"b={gone}").startswith(
        f"model a --onnx {tmp_path / 'other.onnx'}: not an export of {classifier}: its id2label differ"
    )


def test_ctrl_c_before_the_endpoint_is_up_is_a_clean_stop(classifier, monkeypatch, capsys):
    """Ctrl-C (or SIGTERM) while Serve starts (a replica loading, or waiting for room): what the
    start began is shut down (start_endpoint's own cleanup), and the command ends with one line and
    status 130, not a traceback; its SIGTERM handler is put back."""
    import signal

    from pipelines.cli import serve as command
    from pipelines.cli.command import main

    def interrupted(app_of, options):
        assert signal.getsignal(signal.SIGTERM) is command.interrupt  # SIGTERM stops a start as Ctrl-C does
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "init_ray", lambda: None)
    monkeypatch.setattr(command, "host_across_nodes", lambda host: False)
    monkeypatch.setattr(command, "replica_gpus", lambda options: 0.0)  # no Ray started: none to read
    monkeypatch.setattr(command, "auto_threads", lambda options, gpus: 1)
    monkeypatch.setattr(command, "start_endpoint", interrupted)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["serve", classifier]) == 130
    assert capsys.readouterr().out.endswith("stopped before the endpoint came up\n")
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_start_up_lines_show_only_the_requests_each_model_answers():
    """One model: its predict example where it predicts, its embed example where it embeds (a head's
    ONNX export does not; an --embedding export predicts nothing); several: each model's file."""
    from pipelines.cli.serve_models import serving_lines
    from pipelines.stages.serve_options import ServeOptions
    from pipelines.stages.served_model import ServedModel

    url, options = "http://127.0.0.1:8000/predict", ServeOptions(threads_per_replica=2)
    head = ServedModel({}, "classification", ("text", "text_pair"), ("text",), ["a", "b"], 128, True, False)
    encoder = ServedModel({}, "classification", ("text", "text_pair"), ("text",), ["a", "b"], 128, False, True)
    lines = serving_lines(url, options, {"": "best"}, {"": head}, {"": ("best.onnx", "--onnx")}).splitlines()
    assert (
        lines[0]
        == f"serving best (classification: a, b; 128 tokens; onnxruntime on best.onnx; 2 threads a replica) at {url}"
    )
    assert lines[1].startswith(f"  curl -s {url} -H 'Content-Type: application/json' -d '{{\"text\": \"...\"}}'")
    assert not any("/embed" in line for line in lines) and lines[-1] == "Ctrl-C stops it."
    lines = serving_lines(url, options, {"": "best"}, {"": encoder}, {"": ("enc.onnx", "--onnx")}).splitlines()
    assert lines[0].startswith("serving best (the encoder of a classification model: sentence vectors only; 128 tokens")
    assert lines[1] == f'  curl -s {url}/embed -d \'{{"text": "..."}}\'    # a sentence vector (and pooling, normalize)'
    several = serving_lines(
        url, options, {"h": "H", "e": "E"}, {"h": head, "e": encoder}, {"h": ("h.onnx", ""), "e": ("e.onnx", "")}
    ).splitlines()
    assert several[1:3] == [
        "  h: H (classification: a, b; 128 tokens; onnxruntime on h.onnx)",
        "  e: E (the encoder of a classification model: sentence vectors only; 128 tokens; onnxruntime on e.onnx)",
    ]
    assert several[3].startswith(f"  curl -s {url}/h -H ") and several[4].startswith(f"  curl -s {url}/e/embed -d ")
