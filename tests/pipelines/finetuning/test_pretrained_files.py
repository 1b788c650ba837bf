"""A model folder as every entry reads it on the driver (pipelines/finetuning/trial.py
`read_pretrained_files`: finetune.pretrained, predict.model, serve's MODEL_DIR; train.init_from
where the pretraining plan reads it): a pytorch_model.bin holding pickled objects other than tensors
is refused in one line naming the key and the file, before any trial, Ray Data task, replica or
pretraining worker would load it, and nothing in it runs (issue #43)."""

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pipelines.errors import BadInput
from pipelines.finetuning.trial import read_pretrained_files
from tests.pickled_weights import pickled_model_dir


@pytest.mark.parametrize("key", ["finetune.pretrained", "predict.model", "MODEL_DIR"])
def test_a_pickled_pytorch_bin_is_refused_naming_the_key_and_the_file(tiny_pretrained, tmp_path, key):
    folder = pickled_model_dir(tiny_pretrained, tmp_path / "model", tmp_path / "sentinel")
    with pytest.raises(BadInput) as refused:
        read_pretrained_files(str(folder), key)
    message = str(refused.value)
    assert message.startswith(f"{key}: {folder}/pytorch_model.bin: not loaded: it holds pickled objects other than ")
    assert message.endswith("convert it to safetensors") and "\n" not in message
    assert not (tmp_path / "sentinel").exists()


def test_a_tensors_only_pytorch_bin_and_a_pickle_the_loader_never_reads_pass(tiny_pretrained, tmp_path):
    """What the loader will read is checked: a tensors-only pytorch_model.bin passes, and a pickled
    one beside model.safetensors (which the loader reads instead) is left unread."""
    beside = pickled_model_dir(tiny_pretrained, tmp_path / "beside", tmp_path / "sentinel")
    shutil.copy(Path(tiny_pretrained) / "model.safetensors", beside / "model.safetensors")
    assert "model.safetensors" in read_pretrained_files(str(beside), "predict.model")
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "spiece.model"):
        shutil.copy(beside / name, plain / name)
    torch.save(load_file(str(beside / "model.safetensors")), plain / "pytorch_model.bin")
    assert set(read_pretrained_files(str(plain), "predict.model")) == {
        "config.json",
        "spiece.model",
        "pytorch_model.bin",
    }
    assert not (tmp_path / "sentinel").exists()


def test_a_pickled_pytorch_bin_as_train_init_from_is_refused_on_the_driver(tiny_pretrained, tmp_path):
    """Pretraining's train.init_from: checked where the plan reads its architecture, before any worker
    would load the weights (there the refusal was a worker's traceback)."""
    from pipelines.config import load_config
    from pipelines.train.plan import albert_config_of

    folder = pickled_model_dir(tiny_pretrained, tmp_path / "model", tmp_path / "sentinel")
    config = load_config(overrides=[f"run_dir={tmp_path / 'run'}", f"train.init_from={folder}"])
    with pytest.raises(BadInput, match=rf"^train.init_from: {folder}/pytorch_model.bin: not loaded: "):
        albert_config_of(config, 1000)
    assert not (tmp_path / "sentinel").exists()
