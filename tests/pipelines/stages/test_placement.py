"""Work that a cluster nothing adds nodes to can never hold, refused by name before Ray is asked for
it (serve's replicas: test_serve_start.py). The predict stage's pool of model replicas (pipelines/
stages/predict.py check_pool): predict.workers beyond what its nodes hold beside a CPU for Ray
Data's read and write tasks; without the check the pool waited for room for ever (seen:
predict.workers=3 on 2 CPUs never ended). A search's trial (tune_trials.check_trial_fits): Tune
waited for ever too, a warning a minute. The test's Ray: one node of 4 CPUs."""

import pytest

from pipelines.config import load_config
from pipelines.errors import BadInput
from pipelines.stages import predict as stage
from pipelines.stages import ray_runtime
from pipelines.stages.tune_trials import check_trial_fits


@pytest.mark.ray
def test_more_replicas_than_the_nodes_hold_beside_the_read_tasks_are_refused_by_name(
    ray_session, classifier, tmp_path, monkeypatch
):
    (tmp_path / "rows.csv").write_text("text\nthe market rose\n")
    config = load_config(
        overrides=[
            f"run_dir={tmp_path}/run",
            f"predict.model={classifier}",
            f"predict.input={tmp_path}/rows.csv",
            "predict.workers=7",
        ]
    )
    started = []
    monkeypatch.setattr(ray_session.data, "read_datasource", lambda *a, **k: started.append(a))
    with pytest.raises(
        BadInput,
        match=r"^predict\.workers=7: this Ray cluster holds 6 model replicas of 0\.5 CPUs each beside a CPU for "
        r"reading and writing \(its nodes: 1 with 4 CPUs; nothing adds nodes to it\): ask for fewer$",
    ):
        stage.run_predict(config)
    assert not started  # refused before Ray Data was asked for anything
    stage.check_pool(6, 0.5, False)  # 3 CPUs of replicas and one for the tasks: what fits passes
    with pytest.raises(BadInput, match=r"holds 0 model replicas of 1 CPU and 1 GPU each .*1 with 4 CPUs and 0 GPUs"):
        stage.check_pool(1, 1.0, True)
    # where an autoscaler may add nodes, Ray waits for them: nothing is refused
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (True, None))
    stage.check_pool(64, 0.5, False)


@pytest.mark.ray
def test_a_trial_no_node_set_can_hold_is_refused_by_name(ray_session, monkeypatch):
    def tune(*overrides: str):
        return load_config(overrides=list(overrides)).tune

    with pytest.raises(
        BadInput,
        match=r"^tune\.resources_per_trial \(null: \{CPU: 1\}\) with tune\.workers_per_trial=5: this Ray cluster "
        r"holds 4 training processes of that size, and a trial needs 5 \(its nodes: 1 with 4 CPUs; nothing adds",
    ):
        check_trial_fits(tune("tune.workers_per_trial=5"), {"CPU": 1.0})
    with pytest.raises(
        BadInput, match=r"^tune\.resources_per_trial=\{CPU: 3\} with tune\.workers_per_trial=2: .* holds 1 "
    ):
        check_trial_fits(tune("tune.workers_per_trial=2", "tune.resources_per_trial={CPU: 3}"), {"CPU": 3.0})
    with pytest.raises(BadInput, match=r"holds 0 training processes .*1 with 4 CPUs and 0 GPUs"):
        check_trial_fits(tune("tune.resources_per_trial={CPU: 1, GPU: 1}"), {"CPU": 1.0, "GPU": 1.0})
    # what fits passes, Tune's lower-case names included
    check_trial_fits(tune("tune.workers_per_trial=2"), {"CPU": 2.0})
    check_trial_fits(tune("tune.resources_per_trial={cpu: 4}"), {"cpu": 4.0})
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (True, None))
    check_trial_fits(tune("tune.workers_per_trial=64"), {"CPU": 1.0})


@pytest.mark.ray
def test_cpu_workers_no_node_set_can_hold_are_refused_by_name(ray_session, monkeypatch):
    from pipelines.stages.pretrain import check_cpu_workers

    with pytest.raises(
        BadInput,
        match=r"^train\.num_workers: 5 CPU workers of train\.cpus_per_worker=1 each, and this Ray cluster holds 4 "
        r"\(its nodes: 1 with 4 CPUs; nothing adds nodes to it\)",
    ):
        check_cpu_workers(5, 1.0)
    with pytest.raises(BadInput, match=r"cpus_per_worker=1\.5 each, and this Ray cluster holds 2 "):
        check_cpu_workers(3, 1.5)
    check_cpu_workers(8, 0.5)  # fractions add up on a node
    monkeypatch.setattr(ray_runtime, "autoscaler_limits", lambda: (True, None))
    check_cpu_workers(64, 1.0)
