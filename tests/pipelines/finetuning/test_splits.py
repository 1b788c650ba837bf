"""The one way every family takes its train and eval units (splits.py), on toy units: a file read
or the embedded task, a seeded share held out or an eval file, seeded caps, every unit accounted for
in the manifest's shape, and the errors naming the file."""

from collections import Counter
from dataclasses import dataclass, field

import pytest

from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.splits import Units, train_and_eval
from pipelines.finetuning.tables import Accounted


@dataclass
class Words(Accounted):
    source: str
    words: list[str] = field(default_factory=list)
    read: int = 0
    rejected: Counter = field(default_factory=Counter)
    rejection_examples: list[str] = field(default_factory=list)

    def __len__(self):
        return len(self.words)

    def select(self, indices):
        return Words(self.source, [self.words[i] for i in indices])


FILES = {"train": ["a", "b", "", "c", "d", "e", "f", "g", "h", "i"], "dev": ["x", "", "y"], "blank": ["", " "]}


def read(path):
    out = Words(path, read=len(FILES[path]))
    for i, word in enumerate(FILES[path]):
        out.words.append(word) if word.strip() else out.reject(f"line {i + 1}", "empty_word")
    return out


UNITS = Units(
    read=read,
    held_out=lambda source, fraction, seed: (list(range(2, len(source))), [0, 1]),
    sample=lambda chosen, k, seed: list(range(k)),
    unit="words",
)


def test_a_held_out_share_and_caps_account_for_every_unit():
    splits = train_and_eval(FinetuneSection(train_path="train", max_train_examples=4, seed=7), UNITS)
    assert (splits.train.words, splits.evaluation.words) == (["c", "d", "e", "f"], ["a", "b"])
    assert splits.accounting == {
        "inputs": [
            {
                "source": "train",
                "read": 10,
                "usable": 9,
                "rejected": {"empty_word": 1},
                "rejection_examples": ["train line 3: empty_word"],
            }
        ],
        "eval_from": "0.2 of train (seed 7)",
        "train": {"used": 4, "unsampled": 3},
        "eval": {"used": 2, "unsampled": 0},
    }
    assert [s.source for s in splits.sources] == ["train"]


def test_an_eval_file_is_read_as_the_training_one():
    splits = train_and_eval(FinetuneSection(train_path="train", eval_path="dev", max_eval_examples=5), UNITS)
    assert splits.evaluation.words == ["x", "y"] and len(splits.train) == 9
    assert splits.accounting["eval_from"] == "dev" and [s.source for s in splits.sources] == ["train", "dev"]
    assert splits.accounting["inputs"][1]["rejected"] == {"empty_word": 1}
    assert splits.accounting["eval"] == {"used": 2, "unsampled": 0}


def test_the_embedded_task_and_the_errors_name_what_is_wrong():
    embedded = Units(**{**UNITS.__dict__, "embedded": lambda: read("train"), "held_out_as": "{source} by {seed}"})
    assert train_and_eval(FinetuneSection(), embedded).accounting["eval_from"] == "train by 42"
    with pytest.raises(BadInput, match="finetune.task=classification has no embedded task: set finetune.train_path"):
        train_and_eval(FinetuneSection(), UNITS)
    with pytest.raises(BadInput, match=r"^blank: no usable words \(of 2, rejected: \{'empty_word': 2\}\)$"):
        train_and_eval(FinetuneSection(train_path="blank"), UNITS)
    with pytest.raises(BadInput, match=r"^blank: no usable words \(of 2"):
        train_and_eval(FinetuneSection(train_path="train", eval_path="blank"), UNITS)
    everything = Units(**{**UNITS.__dict__, "held_out": lambda source, fraction, seed: (list(range(len(source))), [])})
    with pytest.raises(BadInput, match="train: 9 usable words are too few to hold out finetune.eval_fraction=0.2"):
        train_and_eval(FinetuneSection(train_path="train"), everything)
