"""The finetune stage's fingerprint and tune.space (pipelines/rundir/registry.py `result_values`)."""

from pipelines.config import load_config
from pipelines.rundir.registry import stage_fingerprint


def test_a_finetune_key_the_search_space_sets_changes_no_fingerprint(tmp_path):
    """tune.space's values reach every trial, not finetune.lr's (the stage warns so): a changed
    finetune.lr under a space that searches it reran the whole search for the same result; outside
    the space it still changes the search's."""

    def fingerprint(*overrides: str) -> str:
        config = load_config(overrides=[f"run_dir={tmp_path}", *overrides])
        return stage_fingerprint(config, "finetune", {"pretrain": "p"})

    space = "tune.space={finetune.lr: [0.0001, 0.0003]}"
    assert fingerprint(space, "finetune.lr=0.5") == fingerprint(space)
    assert fingerprint(space, "finetune.epochs=7") != fingerprint(space)
    other = "tune.space={finetune.epochs: [1, 2]}"
    assert fingerprint(other, "finetune.lr=0.5") != fingerprint(other)
