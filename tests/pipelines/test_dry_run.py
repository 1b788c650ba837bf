"""--dry-run says what the next run will do in the states a killed or paused run leaves behind: a
lease whose process is gone, a swap killed midway, a build killed before its swap; each prediction
is then checked against what the next run does. Locally and on s3:// (moto)."""

import socket
import time

import pytest

from pipelines.cli import run as run_command
from pipelines.rundir import lifecycle, ownership
from pipelines.rundir.lease import LEASE_FILE, Holder
from pipelines.rundir.lifecycle import run_stage
from pipelines.storage import join, write_text
from pipelines.storage.contained import Contained

from . import toy_stage
from .toy_stage import configure, toy_output


def dry_run(capsys, run_dir, seed) -> str:
    capsys.readouterr()
    assert run_command.main([f"run_dir={run_dir}", f"data.seed={seed}", "--stages", "toy", "--dry-run"]) == 0
    return capsys.readouterr().out


def test_a_lease_whose_process_is_gone_is_reported_as_taken_over(run_root, toy, capsys):
    run_dir = join(run_root, "run")
    ownership.ensure_run_dir(run_dir)
    dead = Holder("dead", socket.gethostname(), 2**22 + 4321, "albert-ray data", None, 0.0, time.time(), 120)
    write_text(join(run_dir, LEASE_FILE), dead.encode().decode())
    out = dry_run(capsys, run_dir, 1)
    assert "in use by" not in out
    assert f"no longer held (its process (pid {2**22 + 4321}) is gone): the next run takes it over" in out
    run_stage(configure(run_dir, 1), "toy")  # and it does
    assert toy_output(run_dir) == "seed 1"


def test_a_swap_killed_midway_is_reported_as_finished_by_the_next_run(run_root, toy, capsys, monkeypatch):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    real_move = Contained.move

    def killed_after_one_move(self, src, dst, **order):
        real_move(self, src, dst, **order)
        raise KeyboardInterrupt("killed during the swap")

    monkeypatch.setattr(Contained, "move", killed_after_one_move)
    with pytest.raises(KeyboardInterrupt):
        run_stage(configure(run_dir, 2), "toy")  # the current output moved aside, the new one not yet in
    monkeypatch.setattr(Contained, "move", real_move)
    out = dry_run(capsys, run_dir, 2)
    assert "interrupted commit of the toy stage (_swap.json, 0 of 2 steps done): the next run finishes it" in out
    assert "toy: up to date: skipped" in out and "discarded" not in out and "building:" not in out
    assert f"previous: {join(run_dir, '_previous', 'toy')}" in out
    assert run_stage(configure(run_dir, 2), "toy").skipped  # finishes the swap, then finds it up to date
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"


def test_a_build_killed_before_its_swap_is_reported_as_swapped_in(run_root, toy, capsys, monkeypatch):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")

    def killed(*args):
        raise KeyboardInterrupt("killed between the manifest and the swap")

    real_commit = lifecycle.commit
    monkeypatch.setattr(lifecycle, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        run_stage(configure(run_dir, 2), "toy")
    monkeypatch.setattr(lifecycle, "commit", real_commit)
    out = dry_run(capsys, run_dir, 2)
    assert "toy: runs: swaps in its complete build" in out and "no rebuild" in out
    assert "complete, not swapped in yet: the next run swaps it in without building again" in out
    assert "complete, another config or forced: discarded" in dry_run(capsys, run_dir, 3)  # another config
    built = []
    monkeypatch.setattr(toy_stage, "build_toy", lambda run: built.append(1))
    assert not run_stage(configure(run_dir, 2), "toy").skipped
    assert built == [] and toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
