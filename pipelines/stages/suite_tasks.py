"""Searching an evaluation suite's tasks side by side: as many at once as the cluster fits all of
their trials together, in threads of the stage's driver (each task's search is its own Ray Tune run);
one at a time, as before, where one task's trials alone fill the cluster."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

import ray

from ..config import Config
from .tune_search import concurrent_trials
from .tune_trials import trial_resources

T = TypeVar("T")


def task_demand(config: Config) -> dict[str, float]:
    """What a task's search holds at most at once: its concurrent trials (the samples, or the
    repeats, capped by its concurrency limit) times a trial's resources."""
    tc = config.tune
    limit = concurrent_trials(tc)
    trials = max(tc.num_samples, tc.repeats, 1)
    at_once = min(trials, limit) if limit else trials
    return {k: v * tc.workers_per_trial * at_once for k, v in trial_resources(tc).items() if v > 0}


def tasks_at_once(demands: list[dict[str, float]], cluster: dict[str, float]) -> int:
    """How many tasks may search at once: as many as the cluster fits the largest task's demand,
    for every resource (at least 1: a task bigger than the cluster waits on itself, as ever)."""
    fits = [int(cluster.get(k, 0) // v) for demand in demands for k, v in demand.items() if v > 0]
    return max(1, min(fits, default=1))


def search_tasks(configs: dict[str, Config], search: Callable[[str, Config], T]) -> dict[str, T]:
    """`search(name, config)` for each task, side by side where the cluster fits them (in this
    process's threads), else one after another; their results by name, in the given order. Once a
    task has failed no other starts, and its error is raised when those running have ended."""
    at_once = 1
    if len(configs) > 1:
        at_once = min(len(configs), tasks_at_once([task_demand(c) for c in configs.values()], ray.cluster_resources()))
    if at_once == 1:
        return {name: search(name, config) for name, config in configs.items()}
    print(f"finetune: searching up to {at_once} of the {len(configs)} tasks side by side", flush=True)
    futures: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="task") as pool:
        for name, config in configs.items():
            running = [f for f in futures.values() if not f.done()]
            if len(running) == at_once:
                wait(running, return_when=FIRST_COMPLETED)
            if any(f.done() and f.exception() is not None for f in futures.values()):
                break
            futures[name] = pool.submit(search, name, config)
    for future in futures.values():
        if future.exception() is not None:
            raise future.exception()
    return {name: future.result() for name, future in futures.items()}
