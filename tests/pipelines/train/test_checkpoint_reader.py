"""A pretraining checkpoint is read without running code from it: the product's own checkpoint
loads back exactly, and a `.metadata` or a `.distcp` value crafted to run code when unpickled, or
a metadata naming a shard outside its folder, is refused in one line naming the file, with nothing
run and nothing read from elsewhere."""

import os
import pathlib
import pickle

import pytest
import torch
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.optim.lr_scheduler import LambdaLR

from pipelines.errors import BadInput
from pipelines.train.checkpoint import load_checkpoint, save_checkpoint

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


class Touch:
    """Unpickled, it creates `path`: what any code a crafted pickle carries could do."""

    def __init__(self, path):
        self.path = pathlib.Path(path)

    def __reduce__(self):
        return pathlib.Path.touch, (self.path,)


def trained(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = LambdaLR(optimizer, lambda s: 1.0 / (s + 1))
    model(torch.randn(5, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    return model, optimizer, scheduler


@pytest.fixture
def checkpoint(tmp_path):
    model, optimizer, scheduler = trained(0)
    folder = tmp_path / "step_000001"
    save_checkpoint(str(folder), model, optimizer, scheduler, 1)
    return folder


def test_a_checkpoint_loads_back_exactly(checkpoint):
    saved_model, saved_optimizer, _ = trained(0)
    model, optimizer, scheduler = trained(1)  # other weights and optimizer state, overwritten by the load
    assert load_checkpoint(str(checkpoint), model, optimizer, scheduler)["step"] == 1
    for param, saved in zip(model.parameters(), saved_model.parameters(), strict=True):
        assert torch.equal(param, saved)
    state, saved_state = optimizer.state_dict(), saved_optimizer.state_dict()
    for index, values in saved_state["state"].items():
        for key, value in values.items():
            assert torch.equal(state["state"][index][key], value), key
    assert state["param_groups"][0]["betas"] == saved_state["param_groups"][0]["betas"]
    assert state["param_groups"][0]["initial_lr"] == 0.01


def test_a_crafted_metadata_runs_nothing_and_is_refused(checkpoint, tmp_path):
    sentinel = tmp_path / "ran"
    (checkpoint / ".metadata").write_bytes(pickle.dumps(Touch(sentinel)))
    model, optimizer, scheduler = trained(1)
    with pytest.raises(BadInput, match=str(checkpoint / ".metadata")) as refused:
        load_checkpoint(str(checkpoint), model, optimizer, scheduler)
    assert not sentinel.exists()
    assert "\n" not in str(refused.value)


def rewrite_metadata(checkpoint: pathlib.Path, fqn: str, info: _StorageInfo) -> None:
    """The checkpoint's metadata with the value `fqn` stored as `info` says (what a forger writes)."""
    metadata = pickle.loads((checkpoint / ".metadata").read_bytes())
    (index,) = [i for i in metadata.storage_data if i.fqn == fqn]
    metadata.storage_data[index] = info
    (checkpoint / ".metadata").write_bytes(pickle.dumps(metadata))


def test_a_crafted_value_in_a_shard_runs_nothing_and_is_refused(checkpoint, tmp_path):
    """The optimizer's hyperparameters are pickled values in the shards (DCP's own loader reads them
    with torch.load(weights_only=False))."""
    sentinel = tmp_path / "ran"
    payload = checkpoint / "__1_0.distcp"
    torch.save(Touch(sentinel), payload)
    rewrite_metadata(checkpoint, "optimizer.param_groups.0.lr", _StorageInfo(payload.name, 0, payload.stat().st_size))
    model, optimizer, scheduler = trained(1)
    with pytest.raises(BadInput, match=str(checkpoint)) as refused:
        load_checkpoint(str(checkpoint), model, optimizer, scheduler)
    assert not sentinel.exists()
    assert "optimizer.param_groups.0.lr" in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("how", ["outside", "link"])
def test_a_shard_outside_the_folder_is_not_read(checkpoint, tmp_path, how):
    """A metadata naming `../elsewhere` or a shard that is a link to another file: refused before
    anything is read (a forger's file would otherwise become the model's weights)."""
    outside = tmp_path / "elsewhere.distcp"
    outside.write_bytes((checkpoint / "__0_0.distcp").read_bytes())
    if how == "outside":
        name = "../elsewhere.distcp"
    else:
        name = "__0_0.distcp"
        os.remove(checkpoint / name)
        os.symlink(outside, checkpoint / name)
    metadata = pickle.loads((checkpoint / ".metadata").read_bytes())
    for index, info in metadata.storage_data.items():
        metadata.storage_data[index] = _StorageInfo(name, info.offset, info.length)
    (checkpoint / ".metadata").write_bytes(pickle.dumps(metadata))
    model, optimizer, scheduler = trained(1)
    with pytest.raises(BadInput, match=str(checkpoint / ".metadata")):
        load_checkpoint(str(checkpoint), model, optimizer, scheduler)
