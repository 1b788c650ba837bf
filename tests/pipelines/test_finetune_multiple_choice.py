"""The fine-tuning stage on multiple choice (finetune.task=multiple_choice) through Ray Tune: a
SWAG-layout csv in, accuracy and the predictions file out, every question accounted for, and an
export transformers loads as AlbertForMultipleChoice with our logits."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from pipelines.config import load_config
from pipelines.finetuning.choice_family import collate, encode_question
from pipelines.finetuning.tokenizer import PairTokenizer

ANIMALS = {"dog": "barks", "cat": "meows", "cow": "moos", "duck": "quacks"}


def swag(n: int, seed: int) -> str:
    """`The <animal>` -> four endings, the right one its sound (at a seeded position)."""
    rng = np.random.default_rng(seed)
    rows = ["video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"]
    for i in range(n):
        animal = sorted(ANIMALS)[rng.integers(len(ANIMALS))]
        endings = [ANIMALS[a] + " loudly." for a in sorted(ANIMALS)]
        order = rng.permutation(4)
        shuffled = [endings[j] for j in order]
        label = int(np.where(order == sorted(ANIMALS).index(animal))[0][0])
        rows.append(f"v{i},{i},x,It is morning on the farm.,The {animal},gold,{','.join(shuffled)},{label}\n")
    return "".join(rows)


@pytest.mark.slow
def test_a_swag_search_scores_accuracy_and_transformers_loads_the_export(ray_session, tiny_pretrained, tmp_path):
    from pipelines.stages.finetune import run_finetune

    (tmp_path / "train.csv").write_text(swag(40, 0) + "bad,0,x,ctx,The cat,gold,a,b,c,d,7\n")
    (tmp_path / "val.csv").write_text(swag(12, 1))
    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            "finetune.task=multiple_choice",
            f"finetune.pretrained={tiny_pretrained}",
            f"finetune.train_path={tmp_path}/train.csv",
            f"finetune.eval_path={tmp_path}/val.csv",
            "finetune.max_seq_length=24",
            "tune.num_samples=1",
            "tune.scheduler=none",
            "tune.space={finetune.lr: 0.001, finetune.batch_size: 8, finetune.epochs: 1}",
        ]
    )
    out = Path(run_finetune(config))
    best = json.loads((out / "best.json").read_text())
    assert best["metric"] == "accuracy" and best["eval_examples"] == 12 and best["label_names"] is None
    source = json.loads((out / "manifest.json").read_text())["examples"]["inputs"][0]
    assert (source["read"], source["usable"], source["rejected"]) == (41, 40, {"label_not_a_choice": 1})
    # the reported accuracy, recomputed from predictions.jsonl and the eval file's labels (by id: fold-ind)
    predictions = {
        p["id"]: p["prediction"] for p in map(json.loads, (out / "predictions.jsonl").read_text().splitlines())
    }
    gold = {line.split(",")[1]: int(line.rsplit(",", 1)[1]) for line in swag(12, 1).splitlines()[1:]}
    assert predictions.keys() == gold.keys()
    assert best["value"] == sum(predictions[i] == gold[i] for i in gold) / 12

    exported = json.loads((out / "best" / "config.json").read_text())
    assert exported["architectures"] == ["AlbertForMultipleChoice"]
    model = transformers.AlbertForMultipleChoice.from_pretrained(out / "best").eval()
    from albert_model.heads import AlbertForMultipleChoice
    from albert_model.hf import load_hf_pretrained

    ours = load_hf_pretrained(out / "best", AlbertForMultipleChoice).eval()
    tokenizer = PairTokenizer(str(out / "best"))
    endings = [ANIMALS[a] + " loudly." for a in sorted(ANIMALS)]
    question = encode_question(tokenizer, "It is morning on the farm.", "The dog", endings, 24)
    batch = collate([question], [0], tokenizer.pad_id)
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch), model(**batch).logits, rtol=1e-5, atol=1e-5)
