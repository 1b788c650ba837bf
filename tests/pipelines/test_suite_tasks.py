"""An evaluation suite's tasks searched side by side (pipelines/stages/suite_tasks.py): how many at
once, and that they do run at once, in order of results, with a failure stopping the rest. The
searches here are stand-ins that record what ran; the suite's real run is the `family_suite`
fixture, which searches its six tasks side by side on the test session's 4 CPUs."""

import threading

import pytest

from pipelines.config import load_config
from pipelines.stages import suite_tasks
from pipelines.stages.suite_tasks import search_tasks, task_demand, tasks_at_once


def tune(*overrides):
    return load_config(None, ["tune.resources_per_trial={CPU: 1}", *overrides])


def test_a_task_holds_its_concurrent_trials_resources():
    assert task_demand(tune("tune.num_samples=1")) == {"CPU": 1.0}
    assert task_demand(tune("tune.num_samples=8")) == {"CPU": 8.0}
    assert task_demand(tune("tune.num_samples=8", "tune.max_concurrent_trials=2")) == {"CPU": 2.0}
    assert task_demand(tune("tune.num_samples=1", "tune.repeats=3")) == {"CPU": 3.0}
    gpu = tune("tune.resources_per_trial={CPU: 2, GPU: 1}", "tune.num_samples=2")
    assert task_demand(gpu) == {"CPU": 4.0, "GPU": 2.0}


def test_as_many_tasks_at_once_as_the_cluster_fits_the_largest():
    assert tasks_at_once([{"CPU": 1.0}] * 6, {"CPU": 4.0}) == 4
    assert tasks_at_once([{"CPU": 1.0}, {"CPU": 2.0}], {"CPU": 4.0}) == 2
    assert tasks_at_once([{"CPU": 8.0}, {"CPU": 1.0}], {"CPU": 4.0}) == 1  # one search fills it: in turn
    assert tasks_at_once([{"CPU": 1.0, "GPU": 1.0}] * 3, {"CPU": 16.0, "GPU": 2.0}) == 2
    assert tasks_at_once([{"CPU": 1.0, "GPU": 1.0}], {"CPU": 16.0}) == 1  # no GPU yet (autoscaling)


@pytest.fixture
def four_cpus(monkeypatch):
    monkeypatch.setattr(suite_tasks.ray, "cluster_resources", lambda: {"CPU": 4.0})


@pytest.mark.timeout(60)
def test_tasks_that_fit_run_at_once_and_results_keep_the_tasks_order(four_cpus, capsys):
    configs = {name: tune("tune.num_samples=2") for name in ("a", "b", "c")}  # 2 fit in 4 CPUs
    together = threading.Barrier(2, timeout=30)  # broken (an error) if the two never run at once
    threads = {}

    def search(name, config):
        threads[name] = threading.current_thread().name
        if name != "c":
            together.wait()
        return f"{name}:{config.tune.num_samples}"

    assert list(search_tasks(configs, search).items()) == [("a", "a:2"), ("b", "b:2"), ("c", "c:2")]
    assert threads["a"] != threads["b"]
    assert "searching up to 2 of the 3 tasks side by side" in capsys.readouterr().out
    two = {name: tune("tune.num_samples=1") for name in ("a", "b")}  # 4 would fit: the two
    together.reset()
    assert search_tasks(two, search) == {"a": "a:1", "b": "b:1"}
    assert "searching up to 2 of the 2 tasks side by side" in capsys.readouterr().out


def test_a_failed_task_stops_the_tasks_not_started(four_cpus):
    """a fails once b runs; b still runs when the next slot is asked for (it waits a few seconds
    for a release that never comes), so the failure is seen before c or d would start."""
    configs = {name: tune("tune.num_samples=2") for name in ("a", "b", "c", "d")}
    started, b_started, never = [], threading.Event(), threading.Event()

    def search(name, config):
        started.append(name)
        if name == "a":
            b_started.wait(30)
            raise ValueError("task a failed")
        b_started.set()
        never.wait(3)
        return name

    with pytest.raises(ValueError, match="task a failed"):
        search_tasks(configs, search)
    assert sorted(started) == ["a", "b"]


def test_one_at_a_time_where_one_task_fills_the_cluster(four_cpus):
    configs = {name: tune("tune.num_samples=4") for name in ("a", "b")}
    main = threading.current_thread().name
    ran = []
    assert search_tasks(configs, lambda name, config: ran.append(threading.current_thread().name) or name) == {
        "a": "a",
        "b": "b",
    }
    assert ran == [main, main]
