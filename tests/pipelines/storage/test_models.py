"""Model folders (pipelines/storage/models.py). As every entry reads one on the driver
(`read_model_files`: finetune.pretrained, predict.model, serve's MODEL_DIR; train.init_from where the
pretraining plan reads it): a pytorch_model.bin holding pickled objects other than tensors is
refused in one line naming the key and the file, before any trial, Ray Data task, replica or
pretraining worker would load it, and nothing in it runs (issue #43). As a fine-tuned export is
written (`save_model`): transformers loads its tokenizer with the pretrained casing, the segment ids
and the fine-tuning's length, and keeps the record of how it is applied without a word about it;
predict and serve take their length from that record and read folders without the trial (issue
#44). A folder on S3 reads as its local copy."""

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file

from albert_model import AlbertConfig, AlbertForSequenceClassification
from pipelines.errors import BadInput
from pipelines.finetuning.tokenizer import PairTokenizer
from pipelines.storage.models import (
    RECORD,
    ModelUsage,
    applied_length,
    read_model_files,
    read_usage,
    save_model,
    tokenizer_length,
)
from tests.conftest import VOCAB_SIZE
from tests.pickled_weights import pickled_model_dir


@pytest.mark.parametrize("key", ["finetune.pretrained", "predict.model", "MODEL_DIR"])
def test_a_pickled_pytorch_bin_is_refused_naming_the_key_and_the_file(tiny_pretrained, tmp_path, key):
    folder = pickled_model_dir(tiny_pretrained, tmp_path / "model", tmp_path / "sentinel")
    with pytest.raises(BadInput) as refused:
        read_model_files(str(folder), key)
    message = str(refused.value)
    assert message.startswith(f"{key}: {folder}/pytorch_model.bin: not loaded: it holds pickled objects other than ")
    assert message.endswith("convert it to safetensors") and "\n" not in message
    assert not (tmp_path / "sentinel").exists()


def test_a_folder_on_s3_reads_as_the_same_folder_locally(tiny_pretrained, s3_endpoint):
    """The model's files, whatever else the folder holds, by name; a folder on S3 as its local copy."""
    from pipelines.storage import filesystem, write_bytes

    filesystem("s3://models/x")[0].mkdir("models")
    for file in Path(tiny_pretrained).iterdir():
        write_bytes(f"s3://models/tiny/{file.name}", file.read_bytes())
    write_bytes("s3://models/tiny/notes/README.md", b"a folder beside the model's files")
    local = read_model_files(tiny_pretrained, "predict.model")
    assert sorted(local) == ["config.json", "model.safetensors", "spiece.model", "tokenizer_config.json"]
    assert read_model_files("s3://models/tiny", "predict.model") == local


def test_a_tensors_only_pytorch_bin_and_a_pickle_the_loader_never_reads_pass(tiny_pretrained, tmp_path):
    """What the loader will read is checked: a tensors-only pytorch_model.bin passes, and a pickled
    one beside model.safetensors (which the loader reads instead) is left unread."""
    beside = pickled_model_dir(tiny_pretrained, tmp_path / "beside", tmp_path / "sentinel")
    shutil.copy(Path(tiny_pretrained) / "model.safetensors", beside / "model.safetensors")
    assert "model.safetensors" in read_model_files(str(beside), "predict.model")
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("config.json", "spiece.model"):
        shutil.copy(beside / name, plain / name)
    torch.save(load_file(str(beside / "model.safetensors")), plain / "pytorch_model.bin")
    assert set(read_model_files(str(plain), "predict.model")) == {
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


def test_a_fine_tuned_export_keeps_the_pretrained_casing_and_feeds_segment_ids_at_its_length(tiny_pretrained, tmp_path):
    """The pretrained folder's tokenizer settings (here cased, as a hub model's may be, with its own
    model_max_length) are kept, with the segment ids among the inputs and the fine-tuning's length."""
    pretrained = tmp_path / "pretrained"
    pretrained.mkdir()
    shutil.copy(Path(tiny_pretrained) / "spiece.model", pretrained)
    cased = {
        "tokenizer_class": "AlbertTokenizer",
        "do_lower_case": False,
        "keep_accents": False,
        "model_max_length": 512,
    }
    (pretrained / "tokenizer_config.json").write_text(json.dumps(cased))
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE, num_labels=2))
    save_model(model, str(pretrained), str(tmp_path / "export"), ["no", "yes"], None, ModelUsage("classification", 24))

    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "export")
    ours = PairTokenizer(str(tmp_path / "export"))
    pair = ("Shares in BP ROSE after the Bank reported profits.", "The Minister said the vote would be next week.")
    assert not ours.lowercase and ours.pieces("ROSE") != ours.pieces("rose")
    encoded = tokenizer(*pair, truncation=True)
    assert (encoded["input_ids"], encoded["token_type_ids"]) == ours.encode(*pair, 24)
    assert tokenizer.model_max_length == 24 and 1 in encoded["token_type_ids"]
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "export")
    assert theirs.config.id2label == {0: "no", 1: "yes"}


def test_the_record_is_read_back_and_transformers_keeps_it_without_a_word(tiny_pretrained, tmp_path, capfd):
    usage = ModelUsage("question_answering", 96, {"doc_stride": 48, "null_threshold": -1.5})
    model = AlbertForSequenceClassification(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE, num_labels=2))
    save_model(model, tiny_pretrained, str(tmp_path / "export"), ["no", "yes"], None, usage)
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    assert config[RECORD] == {
        "task": "question_answering",
        "max_seq_length": 96,
        "doc_stride": 48,
        "null_threshold": -1.5,
    }
    assert read_usage(config, "export") == usage
    assert read_usage({"architectures": ["AlbertForPreTraining"]}, "hf") is None

    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "export")
    said = capfd.readouterr()
    assert RECORD not in said.out + said.err and not [w for w in caught if RECORD in str(w.message)]
    assert theirs.config.albert_ray == config[RECORD]
    theirs.save_pretrained(tmp_path / "saved_again")
    assert json.loads((tmp_path / "saved_again" / "config.json").read_text())[RECORD] == config[RECORD]


@pytest.mark.parametrize(
    "record",
    [[], {"max_seq_length": 128}, {"task": "", "max_seq_length": 128}, {"task": "x", "max_seq_length": "128"},
     {"task": "x", "max_seq_length": 2}, {"task": "x", "max_seq_length": True}],
)  # fmt: skip
def test_a_malformed_record_is_one_line_naming_the_folder(record):
    with pytest.raises(BadInput) as refused:
        read_usage({RECORD: record}, "models/x")
    assert str(refused.value).startswith(f"models/x: config.json's {RECORD} is not a record of fine-tuning")


def test_the_applied_length_is_the_setting_else_the_fine_tuning_s_else_512_within_the_positions():
    """predict.max_seq_length and serve's --max-seq-length win; without them, the length the model
    was fine-tuned at (issue #44: the BBC model, fine-tuned at 128, was served at 512); without its
    record, the caller's fallback (predict: the run's fine-tuning stage), then 512 capped by the positions."""
    recorded = {"max_position_embeddings": 512, RECORD: {"task": "classification", "max_seq_length": 128}}
    assert applied_length(recorded, 64, "predict.max_seq_length", "m") == 64
    assert applied_length(recorded, None, "predict.max_seq_length", "m", fallback=256) == 128
    assert applied_length({"max_position_embeddings": 512}, None, "k", "m", fallback=256) == 256
    assert applied_length({"max_position_embeddings": 512}, None, "k", "m") == 512
    assert applied_length({"max_position_embeddings": 128}, None, "k", "m") == 128
    with pytest.raises(BadInput, match=r"^--max-seq-length=600 exceeds m's max_position_embeddings=512$"):
        applied_length(recorded, 600, "--max-seq-length", "m")
    beyond = {"max_position_embeddings": 64, RECORD: {"task": "classification", "max_seq_length": 128}}
    with pytest.raises(BadInput, match=rf"^m/config.json's {RECORD}.max_seq_length=128 exceeds m's max_position_"):
        applied_length(beyond, None, "--max-seq-length", "m")


def test_without_a_record_the_length_is_the_tokenizer_s_as_transformers_applies_the_folder():
    """A pretraining export records the length it was trained at only in its tokenizer
    (tokenizer_config.json's model_max_length: data.max_seq_length), which transformers' tokenizer
    cuts at: embeddings of its encoder were cut at 512 instead. A record or a setting still wins; a
    tokenizer of no set length (transformers writes ~1e30) or beyond the positions says nothing."""
    plain = {"max_position_embeddings": 512}
    recorded = {**plain, RECORD: {"task": "classification", "max_seq_length": 128}}
    assert tokenizer_length(json.dumps({"model_max_length": 64}).encode()) == 64
    for unset in (None, b"{}", b"not json", b"[1]", json.dumps({"model_max_length": 64.5}).encode()):
        assert tokenizer_length(unset) is None, unset
    assert applied_length(plain, None, "k", "m", fallback=256, tokenizer=64) == 64
    assert applied_length(recorded, None, "k", "m", tokenizer=64) == 128
    assert applied_length(plain, 32, "k", "m", tokenizer=64) == 32
    assert applied_length(plain, None, "k", "m", tokenizer=int(1e30)) == 512
    assert applied_length({"max_position_embeddings": 128}, None, "k", "m", tokenizer=256) == 128


def test_the_tokenizer_length_is_read_with_the_folder_s_tokenizer_or_missing(tiny_pretrained, tmp_path):
    from pipelines.finetuning.tokenizer import PairTokenizer

    folder = tmp_path / "hf"
    shutil.copytree(tiny_pretrained, folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 96, "do_lower_case": True}))
    assert PairTokenizer(str(folder)).model_max_length == 96
    (folder / "tokenizer_config.json").unlink()
    assert PairTokenizer(str(folder)).model_max_length is None


def test_predict_and_serve_read_model_folders_without_the_trial():
    """Issue #44: reading a model folder lived in finetuning/trial.py, so predict and serve imported
    the trial (and its training loop); nothing they import, however indirectly, is the trial now."""
    from tests.test_structure import ROOT, import_graph

    graph = import_graph(ROOT)
    for entry in ("pipelines.stages.predict", "pipelines.stages.serve", "pipelines.cli.serve"):
        reached, todo = set(), [entry]
        while todo:
            for module in graph[todo.pop()] - reached:
                reached.add(module)
                todo.append(module)
        assert "pipelines.storage.models" in reached and "pipelines.finetuning.trial" not in reached, entry
