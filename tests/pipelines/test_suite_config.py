"""An evaluation suite's config (finetune.tasks): each task a config of its own (its overrides, a
GLUE task's preset by name), errors naming the task, a fingerprint per task that only its own
settings and files change, and the suite's table of results."""

import pytest

from pipelines.config import load_config, task_configs
from pipelines.errors import ConfigError
from pipelines.finetuning.families.checks import check_config
from pipelines.finetuning.results import suite_rows
from pipelines.rundir.registry import stage_fingerprint
from pipelines.storage import copy_tree, filesystem, list_names, read_bytes, write_bytes


def suite(tmp_path, *extra):
    (tmp_path / "a.csv").write_text("text,label\nx,1\ny,0\n")
    (tmp_path / "b.csv").write_text("text,label\nx,1\ny,0\n")
    return load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            f"finetune.pretrained={tmp_path}/model",
            f"finetune.tasks={{a: {{finetune: {{train_path: {tmp_path}/a.csv}}}}, "
            f"b: {{finetune: {{train_path: {tmp_path}/b.csv, lr: 0.001}}, tune: {{num_samples: 2}}}}}}",
            *extra,
        ]
    )


def test_each_task_is_the_run_config_with_its_overrides(tmp_path):
    config = suite(tmp_path, "finetune.lr=0.0003", "tune.num_samples=5")
    tasks = task_configs(config)
    assert list(tasks) == ["a", "b"]
    assert (tasks["a"].finetune.lr, tasks["a"].tune.num_samples) == (0.0003, 5)  # the run's values
    assert (tasks["b"].finetune.lr, tasks["b"].tune.num_samples) == (0.001, 2)  # its own
    assert tasks["b"].finetune.train_path == f"{tmp_path}/b.csv" and tasks["b"].finetune.tasks is None
    assert task_configs(load_config()) == {}


def test_a_glue_task_by_name_reads_glue_files_and_its_overrides_still_apply(tmp_path):
    with pytest.raises(ConfigError, match="finetune.tasks: task name 'CoLA' must be 1-64 lowercase"):
        load_config(overrides=["finetune.glue_dir=/data/glue", "finetune.tasks={CoLA: {}}"])
    config = load_config(
        overrides=[
            "finetune.glue_dir=/data/glue",
            "finetune.tasks={cola: {}, sts-b: {finetune: {lr: 0.001}}, mnli: {}}",
        ]
    )
    cola, stsb, mnli = task_configs(config).values()
    assert (cola.finetune.train_path, cola.finetune.eval_path) == (
        "/data/glue/CoLA/train.tsv",
        "/data/glue/CoLA/dev.tsv",
    )
    assert cola.finetune.column_names == ["source", "label", "original_label", "sentence"]
    assert (cola.finetune.text_column, cola.tune.metric) == ("sentence", "mcc")
    assert (stsb.finetune.task, stsb.tune.metric, stsb.finetune.lr) == ("regression", "pearson", 0.001)
    assert (stsb.finetune.text_column, stsb.finetune.text_pair_column) == ("sentence1", "sentence2")
    assert mnli.finetune.eval_path == "/data/glue/MNLI/dev_matched.tsv"
    assert mnli.finetune.extra_eval_paths == {"mismatched": "/data/glue/MNLI/dev_mismatched.tsv"}
    assert mnli.finetune.label_column == "gold_label"


@pytest.mark.parametrize(
    "tasks, message",
    [
        ("{x: {finetune: {lr: -1}}}", "finetune.tasks.x: finetune.lr=-1.0: must be > 0"),
        ("{x: {finetune: {nope: 1}}}", "finetune.tasks.x: unknown config key 'finetune.nope'"),
        ("{x: {tune: {metric: f1}}}", "finetune.tasks.x: tune.metric=f1: not a classification metric"),
        ("{x: {other: {}}}", "finetune.tasks.x={'other': {}}: must be a mapping with finetune and/or tune"),
        ("{x: {finetune: {tasks: {}}}}", "finetune.tasks.x.finetune: tasks, glue_dir belong to the suite"),
        ("{rte: {}}", "finetune.tasks.rte: a GLUE task's name reads GLUE's files from finetune.glue_dir"),
        ("{a/b: {}}", "finetune.tasks: task name 'a/b' must be 1-64 lowercase"),
        ("{}", "finetune.tasks={}: must name at least one task"),
    ],
)
def test_a_bad_task_is_refused_by_name_before_any_work(tasks, message):
    with pytest.raises(ConfigError) as error:
        check_config(load_config(overrides=[f"finetune.tasks={tasks}"]))  # the entry points' checks
    assert str(error.value).startswith(message), str(error.value)


def test_a_task_fingerprint_changes_with_its_own_settings_and_files_only(tmp_path):
    (tmp_path / "model").mkdir()  # finetune.pretrained: a model folder, fingerprinted by its files
    (tmp_path / "model" / "config.json").write_text("{}")
    base = suite(tmp_path)
    inputs = {}
    before = {n: stage_fingerprint(c, "finetune", inputs) for n, c in task_configs(base).items()}
    changed = suite(
        tmp_path,
        "finetune.tasks={a: {finetune: {train_path: " + f"{tmp_path}/a.csv" + "}}, "
        "b: {finetune: {train_path: " + f"{tmp_path}/b.csv" + ", lr: 0.001}, tune: {num_samples: 3}}}",
    )
    after = {n: stage_fingerprint(c, "finetune", inputs) for n, c in task_configs(changed).items()}
    assert after["a"] == before["a"] and after["b"] != before["b"]
    assert stage_fingerprint(changed, "finetune", inputs) != stage_fingerprint(base, "finetune", inputs)
    (tmp_path / "a.csv").write_text("text,label\nx,1\ny,1\n")  # a's file's content changed
    edited = {n: stage_fingerprint(c, "finetune", inputs) for n, c in task_configs(base).items()}
    assert edited["a"] != before["a"] and edited["b"] == before["b"]


def test_the_suite_table_shows_glue_metrics_and_further_evaluations_beside_the_best():
    fields = {
        "task": "classification",
        "metric": "accuracy",
        "best": {"value": 0.8},
        "best_metrics": {"accuracy": 0.8, "f1": 0.85},
        "trials": {"total": 4},
        "extra_evals": {"mismatched": {"accuracy": 0.75}},
        "repeats": {"mean": 0.79, "std": 0.01, "runs": [{}, {}, {}]},
        "random_arm": {"best": {"value": 0.6}},
    }
    mrpc, mnli = suite_rows({"mrpc": fields, "mnli": fields})
    assert mrpc["also"] == "f1 0.8500; mismatched accuracy 0.7500"
    assert mnli["also"] == "mismatched accuracy 0.7500"  # MNLI's preset names no other metric
    assert (mrpc["mean"], mrpc["std"], mrpc["seeds"], mrpc["random_init"]) == (0.79, 0.01, 3, 0.6)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_copy_tree_copies_every_file_and_writes_the_last_ones_last(where, tmp_path, request):
    if where == "s3":
        request.getfixturevalue("s3_endpoint")
        filesystem("s3://copy-tree/x")[0].mkdir("copy-tree")
        root = "s3://copy-tree/t"
    else:
        root = str(tmp_path)
    for name in ("task.json", "best/config.json", "best/deep/w.bin", "trials.csv"):
        write_bytes(f"{root}/src/{name}", name.encode())
    copy_tree(f"{root}/src", f"{root}/dst", last=["task.json"])
    assert list_names(f"{root}/dst") == ["best", "task.json", "trials.csv"]
    for name in ("task.json", "best/config.json", "best/deep/w.bin", "trials.csv"):
        assert read_bytes(f"{root}/dst/{name}") == name.encode()
