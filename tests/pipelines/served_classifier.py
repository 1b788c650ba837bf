"""The random tiny classifier the serve tests put behind Serve (test_serve.py, test_serve_load.py;
the `classifier` fixture in conftest.py)."""

from pathlib import Path

import torch

from albert_model import AlbertConfig
from albert_model.hf import save_hf_pretrained
from albert_model.model import AlbertForSequenceClassification
from tests.conftest import VOCAB_SIZE

LABELS = ["business", "politics", "sport"]


def save_classifier(tiny_pretrained: str, folder: Path) -> str:
    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE).replace(num_labels=len(LABELS))
    model = AlbertForSequenceClassification(config).eval()
    spiece = Path(tiny_pretrained) / "spiece.model"
    return str(save_hf_pretrained(model, folder, spiece_model=spiece, id2label=dict(enumerate(LABELS))))
