"""The GLUE benchmark's nine tasks as finetune.tasks presets: where each task's files lie in GLUE's
own folder (as its download script unpacks it), which columns hold the texts and the label, what
kind of task it is and the metrics the GLUE leaderboard (and the ALBERT paper) reports for it.

A finetune.tasks entry named after a task here (case, `-` and `_` ignored: `SST-2`, `sst2`, `sts_b`)
with finetune.glue_dir set reads these files; its own overrides still apply on top. The test sets
carry no labels, so a task is searched on train.tsv and scored on its dev file(s), as the paper's
dev-set table is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GluePreset:
    folder: str
    """The task's folder inside GLUE's (its download script's name)."""
    text_column: str
    text_pair_column: str | None
    label_column: str
    task: str = "classification"
    """The finetune.task: a family's name, a config value as a user's YAML writes it (every entry
    point checks it against the families' registry)."""
    metric: str = "accuracy"
    """The search's tune.metric (the paper's dev-set number)."""
    also: tuple[str, ...] = ()
    """Further metrics of the best trial the report shows beside it."""
    eval_file: str = "dev.tsv"
    extra_evals: dict[str, str] = field(default_factory=dict)
    """name -> a further dev file scored with the best model (MNLI's mismatched set)."""
    column_names: tuple[str, ...] | None = None
    """For files without a header row (CoLA)."""

    def overrides(self, glue_dir: str) -> dict[str, dict[str, Any]]:
        """The finetune and tune values this preset sets, its files under `glue_dir`."""
        root = f"{glue_dir.rstrip('/')}/{self.folder}"
        finetune: dict[str, Any] = {
            "task": self.task,
            "train_path": f"{root}/train.tsv",
            "eval_path": f"{root}/{self.eval_file}",
            "text_column": self.text_column,
            "text_pair_column": self.text_pair_column,
            "label_column": self.label_column,
            "column_names": list(self.column_names) if self.column_names else None,
            "extra_eval_paths": {name: f"{root}/{file}" for name, file in self.extra_evals.items()} or None,
        }
        return {"finetune": finetune, "tune": {"metric": self.metric}}


GLUE_TASKS: dict[str, GluePreset] = {
    "cola": GluePreset(
        "CoLA",
        "sentence",
        None,
        "label",
        metric="mcc",
        also=("accuracy",),
        column_names=("source", "label", "original_label", "sentence"),
    ),
    "sst2": GluePreset("SST-2", "sentence", None, "label"),
    "mrpc": GluePreset("MRPC", "#1 String", "#2 String", "Quality", also=("f1",)),
    "qqp": GluePreset("QQP", "question1", "question2", "is_duplicate", also=("f1",)),
    "stsb": GluePreset(
        "STS-B", "sentence1", "sentence2", "score", task="regression", metric="pearson", also=("spearman",)
    ),
    "mnli": GluePreset(
        "MNLI",
        "sentence1",
        "sentence2",
        "gold_label",
        eval_file="dev_matched.tsv",
        extra_evals={"mismatched": "dev_mismatched.tsv"},
    ),
    "qnli": GluePreset("QNLI", "question", "sentence", "label"),
    "rte": GluePreset("RTE", "sentence1", "sentence2", "label"),
    "wnli": GluePreset("WNLI", "sentence1", "sentence2", "label"),
}


def glue_preset(task_name: str) -> GluePreset | None:
    """The preset a finetune.tasks name stands for, if any."""
    return GLUE_TASKS.get(task_name.lower().replace("-", "").replace("_", ""))


__all__ = ["GLUE_TASKS", "GluePreset", "glue_preset"]
