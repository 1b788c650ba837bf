"""Every fine-tuned export of the shared evaluation suite (`family_suite`: each task's best and the
random-start arm's) says how to use it (issue #44): plain transformers loads it as the README shows,
with no extra argument (AutoTokenizer or AlbertTokenizer, AutoModelFor<the family's head>), its
tokenizer gives fine-tuning's ids and segment ids for a text pair and cuts at the length the task
was fine-tuned at, and config.json records the family, that length and its post-processing's
settings. Question answering's export: test_finetune_qa.py; pretrain/hf's: train/test_export.py."""

import json

import pytest
import transformers

from pipelines.finetuning.tokenizer import PairTokenizer
from pipelines.storage.models import RECORD, read_usage

from .family_paths import HEADS

PAIR = ("The minister said the vote would take place next week.", "Shares rose after the bank reported profits.")
SETTINGS = {"token_classification": {"tag_scheme": "IOB2", "word_start": "first_piece"}}
"""The families' recorded post-processing settings; the others record none."""


@pytest.mark.slow
@pytest.mark.parametrize("export", ["topics", "entities", "endings", "endings/random", "mnli", "stsb"])
def test_an_export_loads_in_plain_transformers_and_records_its_fine_tuning(family_suite, export):
    _, run_dir = family_suite
    folder = run_dir / "finetune" / export / "best"
    unit = run_dir / "finetune" / export.split("/")[0] / "task.json"
    finetune = json.loads(unit.read_text())["config"]["finetune"]
    config = json.loads((folder / "config.json").read_text())
    usage = read_usage(config, str(folder))
    assert (usage.task, usage.max_seq_length) == (finetune["task"], finetune["max_seq_length"])
    assert usage.settings == SETTINGS.get(usage.task, {})

    model, info = getattr(transformers, HEADS[usage.task]).from_pretrained(folder, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.config.to_dict()[RECORD] == usage.to_json()
    ours = PairTokenizer(str(folder))
    for tokenizer_class in ("AutoTokenizer", "AlbertTokenizer"):
        tokenizer = getattr(transformers, tokenizer_class).from_pretrained(folder)
        encoded = tokenizer(*PAIR, truncation=True)
        assert tokenizer.model_max_length == usage.max_seq_length, tokenizer_class
        assert (encoded["input_ids"], encoded["token_type_ids"]) == ours.encode(*PAIR, usage.max_seq_length)
