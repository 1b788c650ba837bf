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
    monkeypatch.setattr(local_cluster, "head_temp_dir", lambda state_dir: str(tmp_path / "ray-temp"))
    head = local_cluster.start_head(tmp_path / "state", timeout_s=60)
    try:
        assert tries.read_text().count("x") == 2 and group_alive(head.pid)
        assert "did not register within Ray's fixed 30 s" in capsys.readouterr().err
    finally:
        os.killpg(head.pid, 9)


def test_the_heads_ray_folder_is_inside_one_of_this_users_alone_or_refused_by_name(tmp_path, monkeypatch):
    """The head's Ray folder has a name any user can work out, under the shared /tmp, and Ray opens
    every folder it makes to every user (0777): the folder above Ray's is made 0700, an earlier one of
    this user's left open is closed, and one another user made first, or a link, is refused by name
    before Ray puts its sockets and logs there."""
    import pytest

    from pipelines.errors import UserError
    from pipelines.stages.local_head import head_temp_dir, private_temp_dir

    temp = head_temp_dir(tmp_path / "state")
    assert temp.startswith("/tmp/ray-albert-") and temp.endswith("/r")  # Ray's own folder inside the closed one
    old = os.umask(0)
    try:
        fresh = tmp_path / "fresh"
        private_temp_dir(str(fresh / "r"))
        earlier = tmp_path / "earlier"
        (earlier / "r").mkdir(0o777, parents=True)  # as Ray leaves its folders
        earlier.chmod(0o777)  # an earlier version's temp dir, opened by Ray
        private_temp_dir(str(earlier / "r"))
        private_temp_dir(str(earlier / "r"))  # the next start: the same folders are fine
    finally:
        os.umask(old)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (fresh, earlier)] == [0o700, 0o700]
    assert not (fresh / "r").exists()  # Ray makes its own folder
    linked = tmp_path / "linked"
    linked.symlink_to(fresh)
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "r").symlink_to(tmp_path)
    for path, refused, says in [(linked, linked, "a link"), (planted, planted / "r", "a link")]:
        with pytest.raises(UserError, match=rf"^{refused}: this Ray's temp folder is {says} of user id .*Remove it"):
            private_temp_dir(str(path / "r"))
    assert linked.is_symlink() and (planted / "r").is_symlink()  # left as they were
    monkeypatch.setattr(os, "getuid", lambda: os.stat(fresh).st_uid + 1)  # as another user made it first
    with pytest.raises(UserError, match=rf"^{fresh}: .* is a folder of user id \d+, not a folder of this user's"):
        private_temp_dir(str(fresh / "r"))
