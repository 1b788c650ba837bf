"""`make run`'s local head keeps its token to its owner: written 0600 from the first byte."""

import os
import stat

from pipelines.stages.local_head import write_private


def test_the_token_is_never_readable_by_others(tmp_path):
    old = os.umask(0)  # the most permissive umask: the mode must come from the code, not from it
    try:
        fresh = tmp_path / "token"
        write_private(fresh, "secret")
        stale = tmp_path / "state.json"
        stale.write_text("an earlier head's state")
        stale.chmod(0o644)
        write_private(stale, "new state")
    finally:
        os.umask(old)
    for path, text in [(fresh, "secret"), (stale, "new state")]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == text


def test_the_closing_lines_name_only_the_outputs_that_exist(tmp_path):
    """After a job, `albert-ray local run` names the report and models it made, not those a failed
    job never wrote."""
    from pipelines.cli.local_cluster import outputs_summary

    run_dir = str(tmp_path / "run")
    assert outputs_summary(run_dir) == f"outputs:           none yet in {run_dir}\n"
    (tmp_path / "run" / "pretrain" / "hf").mkdir(parents=True)
    assert outputs_summary(run_dir) == f"pretrained model:  {run_dir}/pretrain/hf (transformers format)\n"
    (tmp_path / "run" / "report").mkdir()
    (tmp_path / "run" / "report" / "report.md").write_text("# report\n")
    assert outputs_summary(run_dir).splitlines()[0] == f"report:            {run_dir}/report/report.md"


def test_a_head_whose_raylet_missed_rays_30_s_is_started_again(tmp_path, monkeypatch, capsys):
    """`ray start` waits a fixed 30 s for its raylet; on a loaded machine it then exits, though its
    dashboard answered already. The head counts as up only once `ray start` says so, and a start
    that timed out is made again (here a stand-in `ray` that times out once, then starts)."""
    import os

    from pipelines.cli import local_cluster
    from pipelines.stages.local_head import LocalHead, group_alive

    tries = tmp_path / "tries"
    fake = tmp_path / "ray"
    fake.write_text(
        "#!/bin/sh\n"
        f"echo x >> {tries}\n"
        f'if [ $(wc -l < {tries}) = 1 ]; then echo "The current node timed out during startup."; exit 1; fi\n'
        'echo "Ray runtime started."\n'
        "exec sleep 60\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(local_cluster, "RAY", str(fake))
    monkeypatch.setattr(LocalHead, "responds", lambda self: True)  # the dashboard answers from the first try
    monkeypatch.setattr(LocalHead, "agent_listening", lambda self: True)
    head = local_cluster.start_head(tmp_path / "state", timeout_s=60)
    try:
        assert tries.read_text().count("x") == 2 and group_alive(head.pid)
        assert "did not register within Ray's fixed 30 s" in capsys.readouterr().err
    finally:
        os.killpg(head.pid, 9)
