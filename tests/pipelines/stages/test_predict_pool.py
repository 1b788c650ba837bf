"""The predict stage's pool of model replicas on a cluster nothing adds nodes to (pipelines/stages/
predict.py check_pool): predict.workers beyond what its nodes hold beside a CPU for Ray Data's read
and write tasks is refused by name before Ray Data starts; without the check the pool waited for
room for ever (seen: predict.workers=3 on 2 CPUs never ended). The test's Ray: one node of 4 CPUs."""

import pytest

from pipelines.config import load_config
from pipelines.errors import BadInput
from pipelines.stages import predict as stage
from pipelines.stages import ray_runtime


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
