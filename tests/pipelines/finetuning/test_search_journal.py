"""The journal an interrupted search resumes from: what it keeps of each trial, what a resume runs
again, and that everything read back is checked (a BadInput names the file)."""

import json

import pytest

from pipelines.errors import BadInput
from pipelines.finetuning.search_journal import SearchJournal, TrialRecord, parse_journal
from pipelines.stages.tune_search import is_point

SPACE = {"finetune.lr": {"loguniform": [1e-5, 1e-3]}, "finetune.batch_size": [16, 32], "finetune.epochs": 3}


def space():
    from pipelines.config import TuneSection
    from pipelines.stages.tune_search import build_search_space

    return build_search_space(TuneSection(space=SPACE))


def a_journal() -> SearchJournal:
    journal = SearchJournal()
    done = journal.trials["abc_00000"] = TrialRecord(
        {"finetune.lr": 1e-4, "finetune.batch_size": 16, "finetune.epochs": 3}
    )
    for epoch in (1, 2, 3):
        done.report("abc_00000", {"epoch": float(epoch), "accuracy": 0.2 * epoch}, 5.0 * epoch, f"t0/ck{epoch}")
    done.end()
    running = journal.trials["abc_00001"] = TrialRecord(
        {"finetune.lr": 3e-4, "finetune.batch_size": 32, "finetune.epochs": 3}
    )
    running.report("abc_00001", {"epoch": 1.0, "accuracy": 0.3}, 4.0, None)
    running.checkpointed("t1/ck1")
    running.report("abc_00001", {"epoch": 2.0, "accuracy": 0.4}, 8.0, None)  # killed before its checkpoint
    return journal


def test_a_journal_reads_back_as_it_was_written(tmp_path):
    journal = a_journal()
    again = parse_journal(json.loads(json.dumps(journal.to_json())), "j.json", is_point(space()))
    assert again == journal
    assert list(again.unfinished()) == ["abc_00001"]
    assert again.scored("accuracy") == [(journal.trials["abc_00000"].config, 0.2 * 3)]


def test_an_unfinished_trial_continues_from_its_last_saved_checkpoint():
    running = a_journal().trials["abc_00001"]
    assert running.continue_from(lambda path: True) == "t1/ck1"
    assert [e["metrics"]["epoch"] for e in running.epochs] == [1.0]  # epoch 2 is trained again
    assert running.continue_from(lambda path: False) is None  # its checkpoint is gone: it starts over
    assert running.epochs == []


def test_the_remaining_configs_are_the_planned_ones_no_trial_ran():
    journal = a_journal()
    ran = [r.config for r in journal.trials.values()]
    other = {"finetune.lr": 5e-4, "finetune.batch_size": 16, "finetune.epochs": 3}
    # a config planned twice runs twice: one run leaves one to run
    assert journal.remaining([ran[0], other, ran[1], ran[0]]) == [other, ran[0]]


@pytest.mark.parametrize(
    "forge, why",
    [
        (lambda j: j["trials"].update({"../../x": j["trials"]["abc_00000"]}), "is not a trial id"),
        (lambda j: j["trials"]["abc_00000"]["config"].update({"finetune.lr": 5.0}), "not a point of tune.space"),
        (lambda j: j["trials"]["abc_00000"]["config"].update({"finetune.seed": 1}), "not a point of tune.space"),
        (lambda j: j["trials"]["abc_00000"]["config"].update({"finetune.lr": "1e-4"}), "not a point of tune.space"),
        (lambda j: j["trials"]["abc_00000"]["epochs"][0].update({"checkpoint": 7}), "epochs are"),
        (lambda j: j["trials"]["abc_00000"]["epochs"][0]["metrics"].update({"accuracy": "x"}), "epochs are"),
        (lambda j: j["trials"]["abc_00000"].update({"ended": "yes"}), "ended is"),
        (lambda j: j.update({"version": 2}), "not a version-1 search journal"),
        (lambda j: j.update({"attempts": 0}), "attempts is"),
    ],
)
def test_a_forged_journal_is_refused_in_one_line_naming_it(forge, why):
    data = json.loads(json.dumps(a_journal().to_json()))
    forge(data)
    with pytest.raises(BadInput, match=why) as refused:
        parse_journal(data, "/run/_scratch/tune/search.journal.json", is_point(space()))
    assert str(refused.value).startswith("/run/_scratch/tune/search.journal.json: ") and "\n" not in str(refused.value)
