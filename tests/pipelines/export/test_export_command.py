"""`albert-ray export onnx MODEL_DIR OUTPUT`: the line it prints (the file, its size against
model.safetensors, the agreement with PyTorch), and its refusals: one line on stderr, status 2."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from albert_model import AlbertConfig, AlbertForTokenClassification
from albert_model.hf import save_hf_pretrained
from pipelines.cli.command import main
from tests.pickled_weights import pickled_model_dir

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def token_classifier(tmp_path_factory) -> Path:
    """A shared token classifier of 4 layers (the head the command test exports; test_onnx.py says why 4)."""
    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=1000).replace(num_hidden_layers=4, num_labels=5)
    return save_hf_pretrained(AlbertForTokenClassification(config), tmp_path_factory.mktemp("export") / "ner")


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.out + captured.err, captured
    assert lines[0].startswith("albert-ray export: error: "), lines
    return lines[0]


def test_the_command_writes_checks_and_says_so(token_classifier, tmp_path, capsys):
    output = tmp_path / "out" / "ner.onnx"
    assert main(["export", "onnx", str(token_classifier), str(output)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {output} (AlbertForTokenClassification, opset " in out
    ratio = float(re.search(r"ratio (\d+\.\d+)", out).group(1))
    assert ratio <= 1.1 and re.search(r"model\.safetensors \d+\.\d+ MB", out)
    difference = float(re.search(r"max abs difference vs PyTorch \(onnxruntime CPU\): (\S+)", out).group(1))
    assert difference < 1e-4
    assert [p.name for p in output.parent.iterdir()] == ["ner.onnx"]  # no partial file left behind

    before = output.read_bytes()
    assert main(["export", "onnx", str(token_classifier), str(output)]) == 2
    assert f"{output} exists; pass --force to replace it" in one_error_line(capsys)
    assert output.read_bytes() == before
    assert main(["export", "onnx", str(token_classifier), str(output), "--force", "--no-check", "--opset", "18"]) == 0
    out = capsys.readouterr().out
    assert "opset 18)" in out and "max abs difference" not in out


def test_what_cannot_be_exported_is_refused_in_one_line(token_classifier, tmp_path, capsys):
    masked_lm = tmp_path / "mlm"
    masked_lm.mkdir()
    config = json.loads((token_classifier / "config.json").read_text())
    (masked_lm / "config.json").write_text(json.dumps({**config, "architectures": ["AlbertForMaskedLM"]}))
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertModel"]}))
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text(json.dumps(config))
    output = str(tmp_path / "x.onnx")
    (tmp_path / "notes").mkdir()
    refused = {
        "architecture": (
            [str(masked_lm), output],
            "cannot export architecture 'AlbertForMaskedLM' to ONNX; supported: ",
        ),
        "model type": ([str(bert), output], "model_type='bert', not an ALBERT export"),
        "no folder": ([str(tmp_path / "nowhere"), output], f"{tmp_path / 'nowhere'}: does not exist"),
        "no model": ([str(tmp_path / "notes"), output], "no config.json (not a transformers-format ALBERT folder)"),
        "no weights": ([str(no_weights), output], "no model.safetensors"),
        "opset": ([str(token_classifier), output, "--opset", "23"], "--opset 23: the export supports opsets 18 to 22"),
        "a directory": ([str(token_classifier), str(tmp_path)], f"{tmp_path} is a directory"),
    }
    for name, (argv, message) in refused.items():
        assert main(["export", "onnx", *argv]) == 2, name
        assert message in one_error_line(capsys), name
    assert not (tmp_path / "x.onnx").exists()


def test_python_dash_m_is_the_same_command(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pipelines.export", "onnx", str(tmp_path / "nowhere"), str(tmp_path / "x.onnx")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"python -m pipelines.export: error: {tmp_path / 'nowhere'}: does not exist"
    ]


def test_the_export_never_writes_where_it_reads(token_classifier, tmp_path, capsys):
    """Issue #43: `export onnx best best/model.safetensors --force` replaced the model's own weights.
    Any OUTPUT inside the model folder (through a link too), or a file the export reads (a weights
    file linked from elsewhere), is refused in one line, --force or not, and nothing is written."""
    before = {p.name: p.read_bytes() for p in token_classifier.iterdir()}
    elsewhere = tmp_path / "weights.safetensors"
    elsewhere.write_bytes(before["model.safetensors"])
    linked = tmp_path / "linked"  # a model folder whose weights are a link to a file outside it
    linked.mkdir()
    (linked / "config.json").write_bytes(before["config.json"])
    (linked / "model.safetensors").symlink_to(elsewhere)
    (tmp_path / "alias").symlink_to(token_classifier)
    model = str(token_classifier)
    refused = [
        [model, f"{model}/model.safetensors", "--force"],
        [model, f"{model}/model.safetensors"],
        [model, f"{model}/config.json", "--force"],
        [model, f"{model}/model.onnx"],
        [model, f"{model}/onnx/model.onnx"],
        [model, str(tmp_path / "alias" / "model.safetensors"), "--force"],
        [str(tmp_path / "alias"), f"{model}/model.onnx", "--force"],
        [str(linked), str(elsewhere), "--force"],
    ]
    for argv in refused:
        assert main(["export", "onnx", *argv]) == 2, argv
        line = one_error_line(capsys)
        assert line.startswith(f"albert-ray export: error: {argv[1]}: ") and "the export never writes" in line, line
    assert {p.name: p.read_bytes() for p in token_classifier.iterdir()} == before
    assert elsewhere.read_bytes() == before["model.safetensors"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["alias", "linked", "weights.safetensors"]


def test_a_pickled_pytorch_bin_is_one_line_and_never_unpickled(token_classifier, tmp_path, capsys):
    """Issue #43: torch's weights_only refusal was a traceback; it is one line naming the file."""
    folder = pickled_model_dir(token_classifier, tmp_path / "pickled", tmp_path / "sentinel")
    assert main(["export", "onnx", str(folder), str(tmp_path / "x.onnx")]) == 2
    line = one_error_line(capsys)
    assert f"{folder}/pytorch_model.bin: not loaded: it holds pickled objects other than tensors" in line, line
    assert line.endswith("convert it to safetensors")
    assert not (tmp_path / "sentinel").exists() and not (tmp_path / "x.onnx").exists()
