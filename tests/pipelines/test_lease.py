"""The run_dir lease: one run at a time, a lease nobody renews taken over, and a run that lost its
lease (or could not renew it) committing nothing; locally and on s3:// (moto)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from pipelines.errors import ConfigError, LeaseHeld
from pipelines.rundir import lifecycle, ownership
from pipelines.rundir.lease import LEASE_FILE, MAX_TTL_S, TTL_ENV, Holder, Lease, hold, lease_ttl_s, read_holder
from pipelines.rundir.lifecycle import run_stage
from pipelines.rundir.registry import read_manifest_at
from pipelines.storage import exists, filesystem, join, write_text
from pipelines.storage.conditional import locked
from pipelines.storage.contained import Contained

from .toy_stage import build_toy, configure, toy_output

REPO = Path(__file__).resolve().parents[2]


def test_a_second_run_is_refused_while_the_first_holds_the_run_dir(run_root, toy):
    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    with hold(run_dir) as lease:
        holder = lease.holder
        with pytest.raises(LeaseHeld, match=rf"in use by .*\(pid {os.getpid()} on .*last heartbeat \d+ s ago\)"):
            Lease.acquire(run_dir)
        assert read_holder(run_dir)[0].owner == holder.owner
        run_stage(configure(run_dir), "toy", owner=holder.owner)  # a DAG task under its driver's lease
        with pytest.raises(LeaseHeld, match="this run no longer holds its lease"):
            run_stage(configure(run_dir, 2), "toy", owner="someone-else")
    assert read_holder(run_dir) is None  # released
    assert toy_output(run_dir) == "seed 1"


def test_only_one_of_many_simultaneous_runs_gets_the_lease(run_root):
    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    won, refused = [], []

    def take():
        try:
            won.append(Lease.acquire(run_dir))
        except LeaseHeld:
            refused.append(1)

    threads = [threading.Thread(target=take) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(refused) == 5
    won[0].release()


def test_a_lease_nobody_renews_is_taken_over(run_root, caplog):
    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    gone = Holder("old", "elsewhere", 1, "albert-ray data", None, 0.0, time.time() - 1000, 120.0)
    write_text(join(run_dir, LEASE_FILE), gone.encode().decode())
    with hold(run_dir) as lease:
        assert read_holder(run_dir)[0].owner == lease.holder.owner
    assert "taking over the lease" in caplog.text
    dead = Holder(
        "dead", os.uname().nodename, 2**22 + 12345, "albert-ray data", None, 0.0, time.time(), 120.0
    )  # this host, a fresh heartbeat, but no such process
    write_text(join(run_dir, LEASE_FILE), dead.encode().decode())
    with hold(run_dir):
        pass


def test_a_run_that_lost_its_lease_commits_nothing(run_root, toy, monkeypatch):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    thief = Holder("thief", "elsewhere", 1, "another run", None, time.time(), time.time(), 120.0)

    def steal_then_build(run):  # taken over between two renewals: the commit renews, and finds out
        write_text(join(run_dir, LEASE_FILE), thief.encode().decode())
        return build_toy(run)

    monkeypatch.setattr(lifecycle, "run_function", lambda name: steal_then_build)
    with pytest.raises(LeaseHeld, match="taken over by `another run`"):
        run_stage(configure(run_dir, 2), "toy")
    assert toy_output(run_dir) == "seed 1"
    assert read_holder(run_dir)[0].owner == "thief"  # the thief's lease is left alone


def test_a_lease_deleted_or_not_renewable_stops_the_commit(run_root, monkeypatch):
    import pipelines.rundir.lease as lease_module

    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    with hold(run_dir) as lease:
        filesystem(join(run_dir, LEASE_FILE))[0].rm(filesystem(join(run_dir, LEASE_FILE))[1])
        with pytest.raises(LeaseHeld, match="taken over by nobody"):
            lease.confirm()
    monkeypatch.setenv(TTL_ENV, "0.3")
    with hold(run_dir) as lease:

        def unreachable(*args):
            raise ConnectionError("the storage is unreachable")

        monkeypatch.setattr(lease_module, "replace_if", unreachable)
        lease.confirm()  # renewed 0 s ago: still ours
        time.sleep(0.4)
        with pytest.raises(LeaseHeld, match="could not renew its lease for 0 s"):
            lease.confirm()
        assert lease._thread.is_alive()  # the renewer survives storage errors and keeps trying
        monkeypatch.undo()


def paused_toy(run_dir, where, ready):
    """The toy stage's command in a process that stops itself (tests/pipelines/paused_stage.py)."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.pipelines.paused_stage", str(ready), where, f"run_dir={run_dir}", "data.seed=1"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def take_over_while_paused(paused, ready, run_dir):
    """Once the paused run stopped and its lease went stale, another run takes the lease over, builds
    and commits seed 2; then the paused run resumes. Returns its stdout and stderr."""
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert paused.poll() is None and time.monotonic() < deadline, paused.communicate()
            time.sleep(0.05)
        time.sleep(2.5)  # its heartbeat stopped with it: the lease is stale after the TTL
        run_stage(configure(run_dir, 2), "toy")  # takes the lease over, builds and commits
        assert toy_output(run_dir) == "seed 2"
    finally:
        os.kill(paused.pid, signal.SIGCONT)
    return paused.communicate(timeout=60)


def test_a_paused_run_whose_lease_was_taken_over_commits_nothing(run_root, toy, tmp_path, monkeypatch):
    """A real stage process stopped (SIGSTOP) between its build and its commit, while another run
    takes the lease over and commits: resumed, it commits nothing and says so in one line; the other
    run's output stays current and nothing was set aside."""
    run_dir = join(run_root, "run")
    monkeypatch.setenv(TTL_ENV, "2")
    ready = tmp_path / "ready"
    paused = paused_toy(run_dir, "commit", ready)
    out, err = take_over_while_paused(paused, ready, run_dir)
    assert paused.returncode == 2, out + err
    last = err.strip().splitlines()[-1]  # after the lease thread's log line saying it lost the lease
    assert last.startswith("albert-ray toy: error: ") and "taken over" in last and "nothing was committed" in last
    assert "Traceback" not in err, err
    assert toy_output(run_dir) == "seed 2" and read_manifest_at(join(run_dir, "toy"))["seed"] == 2
    assert not exists(join(run_dir, "_previous", "toy")) and not exists(join(run_dir, "_swap.json"))


def test_what_a_paused_run_writes_after_its_build_was_discarded_is_kept_aside(tmp_path, toy, monkeypatch, capsys):
    """A run stopped inside its build: the run that took its lease over discards that unfinished
    build, builds and commits; resumed, the paused run's writes recreate `_building/toy` without a
    marker. The next run (forced) keeps that folder aside in `_previous/` instead of refusing to
    work until someone removes it by hand, and a second such folder gets a name of its own."""
    run_dir = str(tmp_path / "run")
    monkeypatch.setenv(TTL_ENV, "2")
    for attempt in (1, 2):
        ready = tmp_path / f"ready{attempt}"
        paused = paused_toy(run_dir, "build", ready)
        out, err = take_over_while_paused(paused, ready, run_dir)
        assert paused.returncode == 2 and "taken over" in err.strip().splitlines()[-1], out + err
        building = join(run_dir, "_building", "toy")
        assert exists(join(building, "out.txt")) and not exists(join(building, ownership.MARKER))
        run_stage(configure(run_dir, 3), "toy", force=True)
        aside = join(run_dir, "_previous", "toy.orphaned" + ("" if attempt == 1 else "-2"))
        assert f"toy: {building} had no marker" in capsys.readouterr().out
        assert toy_output(run_dir, aside.split("/run/")[1]) == "seed 1" and toy_output(run_dir) == "seed 3"
        assert ownership.read_marker(aside)["orphaned"] is True and not exists(building)


def test_a_lease_taken_over_mid_swap_stops_it_before_the_next_step(run_root, toy, monkeypatch):
    """On S3 a swap's steps are checked one by one (locally the lease file's lock keeps a takeover
    out for the whole swap): a swap whose lease is taken after its first step does no second step,
    and the run that took the lease finishes the journal."""
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    thief = Holder("thief", "elsewhere", 1, "another run", None, time.time(), time.time(), 120.0)
    real_move = Contained.move
    moved = []

    def stolen_after_first_move(self, src, dst, **order):
        real_move(self, src, dst, **order)
        moved.append(dst)
        if "://" in run_dir:
            write_text(join(run_dir, LEASE_FILE), thief.encode().decode())
        else:  # the lock keeps a takeover out: it waits for the swap
            with pytest.raises(LeaseHeld, match="held for over 0 s"), locked(lock_path, wait_s=0):
                pass

    lock_path = filesystem(join(run_dir, LEASE_FILE))[1]
    monkeypatch.setattr(Contained, "move", stolen_after_first_move)
    if "://" not in run_dir:
        run_stage(configure(run_dir, 2), "toy")
        assert toy_output(run_dir) == "seed 2" and len(moved) == 2
        return
    with pytest.raises(LeaseHeld, match="taken over by `another run`"):
        run_stage(configure(run_dir, 2), "toy")
    assert len(moved) == 1 and read_manifest_at(join(run_dir, "toy")) is None  # stopped after one step
    monkeypatch.setattr(Contained, "move", real_move)
    write_text(join(run_dir, LEASE_FILE), replace(thief, heartbeat=0.0).encode().decode())  # the thief died
    run_stage(configure(run_dir, 2), "toy")  # takes over, finishes the journal: seed 2 is current
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
    assert not exists(join(run_dir, "_swap.json"))


def test_an_unconfirmed_journal_is_removed_not_replayed(run_root, toy, capsys):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    journal = {"stage": "toy", "action": "commit", "ops": [{"op": "delete", "path": "toy"}], "done": 0}
    write_text(join(run_dir, "_swap.json"), json.dumps({**journal, "owner": "gone", "fenced": False}))
    run_stage(configure(run_dir, 2), "toy")
    assert "removed the unconfirmed commit journal" in capsys.readouterr().out
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
    assert not exists(join(run_dir, "_swap.json"))


def test_a_lease_cannot_block_a_run_dir_forever(run_root):
    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    now = time.time()
    for crafted, why in [
        (Holder("future", "elsewhere", 1, "x", None, now, now + 10**9, 120.0), "in the future"),
        (Holder("huge", "elsewhere", 1, "x", None, now, now - MAX_TTL_S - 1, 10.0**12), "no heartbeat for"),
        (Holder("nan", "elsewhere", 1, "x", None, now, now, float("nan")), "no heartbeat for"),
    ]:
        assert why in crafted.why_stale()
        write_text(join(run_dir, LEASE_FILE), crafted.encode().decode())
        with hold(run_dir) as lease:
            assert read_holder(run_dir)[0].owner == lease.holder.owner
    write_text(join(run_dir, LEASE_FILE), json.dumps({**asdict(crafted), "heartbeat": "tomorrow"}))
    assert read_holder(run_dir)[0].owner == "unreadable"


@pytest.mark.parametrize("ttl", ["0", "-1", "inf", "nan", "1e9", "soon"])
def test_the_lease_ttl_setting_is_checked(monkeypatch, ttl):
    monkeypatch.setenv(TTL_ENV, ttl)
    with pytest.raises(ConfigError, match=rf"{TTL_ENV}={ttl}: the lease's TTL must be"):
        lease_ttl_s()
