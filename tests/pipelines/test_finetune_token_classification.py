"""The fine-tuning stage on token classification (finetune.task=token_classification) through Ray
Tune: CoNLL in, conlleval's scores of the predictions file it writes, every sentence accounted for,
and an export transformers loads as AlbertForTokenClassification with our logits."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from pipelines.config import load_config
from pipelines.finetuning.conll_metrics import conll_scores
from pipelines.finetuning.ner_family import encode_words
from pipelines.finetuning.tokenizer import PairTokenizer

PEOPLE = ["john", "mary", "ahmed", "li", "sofia"]
PLACES = [["paris"], ["london"], ["new", "york"], ["rome"]]


def conll(n: int, seed: int) -> str:
    """Sentences `<person> visited <place> today`, tagged B-PER, O, B-LOC (I-LOC), O."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        place = PLACES[rng.integers(len(PLACES))]
        words = [(PEOPLE[rng.integers(len(PEOPLE))], "B-PER"), ("visited", "O")]
        words += [(w, "B-LOC" if i == 0 else "I-LOC") for i, w in enumerate(place)] + [("today", "O")]
        lines += [f"{w} X X {t}\n" for w, t in words] + ["\n"]
    return "".join(lines)


@pytest.mark.slow
def test_a_conll_search_writes_conlleval_input_and_transformers_loads_it(ray_session, tiny_pretrained, tmp_path):
    from pipelines.stages.finetune import run_finetune

    (tmp_path / "train.conll").write_text("-DOCSTART- -X- -X- O\n\n" + conll(60, 0) + "bad line\n\n")
    (tmp_path / "dev.conll").write_text(conll(15, 1))
    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            "finetune.task=token_classification",
            f"finetune.pretrained={tiny_pretrained}",
            f"finetune.train_path={tmp_path}/train.conll",
            f"finetune.eval_path={tmp_path}/dev.conll",
            "finetune.max_seq_length=16",
            "tune.num_samples=1",
            "tune.scheduler=none",
            "tune.space={finetune.lr: 0.001, finetune.batch_size: 16, finetune.epochs: 2}",
        ]
    )
    out = Path(run_finetune(config))
    best = json.loads((out / "best.json").read_text())
    assert best["metric"] == "f1" and {"precision", "recall", "accuracy", "eval_loss"} <= set(best["metrics"])
    assert best["label_names"] == ["B-LOC", "B-PER", "I-LOC", "O"] and best["eval_examples"] == 15
    source = json.loads((out / "manifest.json").read_text())["examples"]["inputs"][0]
    assert (source["read"], source["usable"], source["rejected"]) == (61, 60, {"column_count": 1})

    # predictions.conll is conlleval's input: its scores are the run's
    sentences = [block.splitlines() for block in (out / "predictions.conll").read_text().split("\n\n") if block]
    gold = [[line.split()[1] for line in s] for s in sentences]
    predicted = [[line.split()[2] for line in s] for s in sentences]
    dev = [block.splitlines() for block in conll(15, 1).split("\n\n") if block.strip()]
    assert [[line.split()[0] for line in s] for s in sentences] == [[line.split()[0] for line in s] for s in dev]
    assert gold == [[line.split()[3] for line in s] for s in dev]
    scores = conll_scores(gold, predicted)
    assert (scores["f1"], scores["precision"], scores["recall"]) == tuple(
        best["metrics"][k] for k in ("f1", "precision", "recall")
    )

    exported = json.loads((out / "best" / "config.json").read_text())
    assert exported["architectures"] == ["AlbertForTokenClassification"]
    assert exported["id2label"] == {"0": "B-LOC", "1": "B-PER", "2": "I-LOC", "3": "O"}
    model = transformers.AlbertForTokenClassification.from_pretrained(out / "best").eval()
    from albert_model.heads import AlbertForTokenClassification
    from albert_model.hf import load_hf_pretrained

    ours = load_hf_pretrained(out / "best", AlbertForTokenClassification).eval()
    ids, _ = encode_words(PairTokenizer(str(out / "best")), ["mary", "visited", "new", "york", "today"], 16)
    inputs = torch.tensor([ids])
    with torch.no_grad():
        torch.testing.assert_close(ours(inputs), model(input_ids=inputs).logits, rtol=1e-5, atol=1e-5)
