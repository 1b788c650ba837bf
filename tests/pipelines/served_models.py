"""Five random tiny exports of three families, in one folder (`albert-ray serve --models DIR`):
three classifiers of their own seeds and labels, a regression and a multiple-choice model, so that
an answer tells which model gave it (test_serve_multiplex.py)."""

from pathlib import Path

import torch

from albert_model import AlbertConfig, AlbertForMultipleChoice
from albert_model.hf import save_hf_pretrained
from albert_model.model import AlbertForSequenceClassification
from tests.conftest import VOCAB_SIZE

CLASSIFIERS = {
    "news": ["business", "politics", "sport"],
    "sentiment": ["negative", "positive"],
    "topics.v2": ["arts", "science", "tech", "travel"],
}
"""Each classifier's name and labels."""
NAMES = [*CLASSIFIERS, "score", "choose"]
"""Every model's name (its folder's): the classifiers, the regression, the multiple-choice model."""


def save_models(tiny_pretrained: str, folder: Path) -> dict[str, str]:
    """Each model's folder under `folder`, by name (in NAMES' order)."""
    spiece = Path(tiny_pretrained) / "spiece.model"
    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE)
    saved = {}
    for seed, (name, labels) in enumerate(CLASSIFIERS.items()):
        torch.manual_seed(seed)
        model = AlbertForSequenceClassification(config.replace(num_labels=len(labels))).eval()
        saved[name] = save_hf_pretrained(model, folder / name, spiece, id2label=dict(enumerate(labels)))
    torch.manual_seed(3)
    regression = AlbertForSequenceClassification(config.replace(num_labels=1)).eval()
    saved["score"] = save_hf_pretrained(regression, folder / "score", spiece, problem_type="regression")
    torch.manual_seed(4)
    chooser = AlbertForMultipleChoice(config).eval()
    with torch.no_grad():
        chooser.classifier.weight.mul_(200)  # scores spread, so that no two choices tie
    saved["choose"] = save_hf_pretrained(chooser, folder / "choose", spiece)
    return {name: str(path) for name, path in saved.items()}
