"""A tiny "pretrained" ALBERT directory for fine-tuning tests: random weights, real tokenizer."""
import pytest
import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import save_hf_pretrained
from pipelines.finetuning.tables import bbc_news_examples
from pipelines.prep.text import normalize_text
from pipelines.vocab import train_sentencepiece

VOCAB_SIZE = 1000


@pytest.fixture(scope="session")
def tiny_pretrained(tmp_path_factory):
    """config.json + model.safetensors of a random tiny AlbertForPreTraining, and a 1000-piece
    SentencePiece model trained on BBC News lines."""
    root = tmp_path_factory.mktemp("pretrained")
    lines = [line for text in bbc_news_examples().texts[::5] for line in text.splitlines() if line.strip()]
    (root / "spiece.model").write_bytes(train_sentencepiece([normalize_text(s) for s in lines], VOCAB_SIZE, []))
    torch.manual_seed(0)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE))
    return str(save_hf_pretrained(model, root / "hf", spiece_model=root / "spiece.model"))
