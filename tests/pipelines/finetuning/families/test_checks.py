"""The config's rules on the task families, from the registry (checks.py): finetune.task names a
family, tune.metric is one of its metrics, a family's own rules hold, for the run and each task of
its suite; and every entry point refuses a config that breaks them, one line and exit 2, before
any work (nothing is written)."""

import pytest

from pipelines.cli.command import main
from pipelines.config import load_config
from pipelines.errors import ConfigError
from pipelines.finetuning.families.checks import check_config

FAMILY_NAMES = "classification, regression, multi_label, token_classification, multiple_choice, question_answering"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["finetune.task=ner"], f"finetune.task='ner': must be one of {FAMILY_NAMES}"),
        (["tune.metric=auc"], "tune.metric='auc': must be one of accuracy, macro_f1, mcc, pearson, spearman,"),
        (
            ["finetune.task=regression", "tune.metric=mcc"],
            "tune.metric=mcc: not a regression metric (finetune.task); use one of pearson, spearman",
        ),
        (
            ["finetune.task=question_answering", "finetune.max_seq_length=20", "finetune.max_query_length=17"],
            "finetune.max_query_length=17: leaves no context in a window of finetune.max_seq_length=20",
        ),
        (["finetune.tasks={x: {finetune: {task: ner}}}"], "finetune.tasks.x: finetune.task='ner': must be one of"),
        (
            ["finetune.task=regression", "finetune.tasks={x: {finetune: {task: multi_label}}}", "tune.metric=pearson"],
            "finetune.tasks.x: tune.metric=pearson: not a multi_label metric",
        ),
        (
            ["finetune.task=token_classification", "finetune.exit_heads=true"],
            "finetune.exit_heads: the token_classification family's head has no answer to settle between depths "
            "(early exit is the sequence families'): classification, regression, multi_label",
        ),
        (
            ["finetune.task=question_answering", "finetune.exit_heads=true"],
            "finetune.exit_heads: the question_answering family's head has no answer to settle between depths",
        ),
    ],
)
def test_a_config_breaking_a_family_rule_is_refused_naming_the_key(overrides, message):
    config = load_config(overrides=overrides)  # the config layer does not know the families
    with pytest.raises(ConfigError) as error:
        check_config(config)
    assert str(error.value).startswith(message), str(error.value)


def test_a_config_keeping_them_passes():
    for overrides in (
        [],
        ["finetune.task=question_answering", "tune.metric=exact"],
        ["finetune.task=multi_label"],
        ["finetune.task=token_classification", "distill.layers=half"],
        ["finetune.task=question_answering", "distill.layers=2", "distill.hidden_weight=1.0"],
        ["finetune.task=multiple_choice", "distill.layers=half"],
    ):
        check_config(load_config(overrides=overrides))
    check_config(load_config(overrides=["finetune.tasks={a: {finetune: {task: regression}}, b: {}}"]))


def test_every_entry_point_refuses_them_before_any_work(tmp_path, capsys):
    run_dir = tmp_path / "run"
    for argv in (
        ["vocab", "finetune.task=ner"],
        ["finetune", "tune.metric=auc"],
        ["run", "--dry-run", "finetune.task=ner"],
        ["restore", "vocab", "finetune.task=ner"],
        ["local", "run", "finetune.task=ner"],
    ):
        assert main([*argv, f"run_dir={run_dir}"]) == 2, argv
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in captured.out + captured.err, (argv, captured)
        assert lines[0].startswith(f"albert-ray {argv[0]}: error: "), lines
        assert "finetune.task='ner': must be one of" in lines[0] or "tune.metric='auc'" in lines[0], lines
    assert not run_dir.exists()
