"""The config's rules that involve the task families, from the registry: finetune.task names a
family, tune.metric is one of its metrics, and the family's own rules (question answering's window)
hold, for the run's config and each task of an evaluation suite. The config layer cannot know the
families (it lies below them), so every entry point runs `check_config` right after it loads a
config, before any work (pipelines/cli: the stage commands, `run` and its DAG, `restore`)."""

from __future__ import annotations

from ...config import Config, task_configs
from ...errors import ConfigError
from . import FAMILIES, tune_metrics


def check_task(config: Config) -> None:
    """One task's rules: its family, the family's own rules, its metric; ConfigError naming the key."""
    finetune, tune = config.finetune, config.tune
    finetune.require("task", finetune.task in FAMILIES, f"must be one of {', '.join(FAMILIES)}")
    family = FAMILIES[finetune.task]
    if family.check is not None:
        family.check(finetune)
    if finetune.exit_heads and not family.reads_depths:
        raise ConfigError(
            f"finetune.exit_heads: the {family.name} family's head has no answer to settle between depths (early "
            f"exit is the sequence families'): {', '.join(f.name for f in FAMILIES.values() if f.reads_depths)}"
        )
    metrics = tune_metrics()
    tune.require(
        "metric", tune.metric is None or tune.metric in metrics, f"must be one of {', '.join(metrics)} or null"
    )
    if tune.metric is not None and tune.metric not in family.metrics:
        raise ConfigError(
            f"tune.metric={tune.metric}: not a {family.name} metric (finetune.task); "
            f"use one of {', '.join(family.metrics)}"
        )


def check_config(config: Config) -> None:
    """The run's task and each task of its evaluation suite (named in the error: finetune.tasks.NAME)."""
    check_task(config)
    for name, task in task_configs(config).items():
        try:
            check_task(task)
        except ConfigError as e:
            raise ConfigError(f"finetune.tasks.{name}: {e}") from None


__all__ = ["check_config", "check_task"]
