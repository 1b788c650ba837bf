"""The run_dir lease: one run at a time, a lease nobody renews taken over, and a run that lost its
lease (or could not renew it) committing nothing; locally and on s3:// (moto)."""

import os
import threading
import time

import pytest

from pipelines import lifecycle, ownership
from pipelines.errors import LeaseHeld
from pipelines.lease import LEASE_FILE, TTL_ENV, Holder, Lease, hold, read_holder
from pipelines.lifecycle import run_stage
from pipelines.storage import filesystem, join, write_text

from .toy_stage import build_toy, configure, toy_output


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
    gone = Holder("old", "elsewhere", 1, "python -m pipelines.data", None, 0.0, time.time() - 1000, 120.0)
    write_text(join(run_dir, LEASE_FILE), gone.encode().decode())
    with hold(run_dir) as lease:
        assert read_holder(run_dir)[0].owner == lease.holder.owner
    assert "taking over the lease" in caplog.text
    dead = Holder(
        "dead", os.uname().nodename, 2**22 + 12345, "python -m pipelines.data", None, 0.0, time.time(), 120.0
    )  # this host, a fresh heartbeat, but no such process
    write_text(join(run_dir, LEASE_FILE), dead.encode().decode())
    with hold(run_dir):
        pass


def test_a_run_that_lost_its_lease_commits_nothing(run_root, toy, monkeypatch):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    thief = Holder("thief", "elsewhere", 1, "another run", None, time.time(), time.time() + 3600, 120.0)

    def steal_then_build(run):  # taken over between two renewals: the commit renews, and finds out
        write_text(join(run_dir, LEASE_FILE), thief.encode().decode())
        return build_toy(run)

    monkeypatch.setattr(lifecycle, "run_function", lambda name: steal_then_build)
    with pytest.raises(LeaseHeld, match="taken over by `another run`"):
        run_stage(configure(run_dir, 2), "toy")
    assert toy_output(run_dir) == "seed 1"
    assert read_holder(run_dir)[0].owner == "thief"  # the thief's lease is left alone


def test_a_lease_deleted_or_not_renewable_stops_the_commit(run_root, monkeypatch):
    import pipelines.lease as lease_module

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
