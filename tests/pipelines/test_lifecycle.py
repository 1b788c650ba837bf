"""The stage lifecycle without Ray, on a toy sixth stage declared here (one declaration and its run
function is all a stage needs): ownership and refusals, replace-on-success with one previous
generation, interrupted swaps, restore, truncated manifests, and the run_dir lease, locally and on
s3:// (moto)."""
import json
import os
import threading
import time
from pathlib import Path

import pytest

from pipelines import lifecycle
from pipelines.config import load_config
from pipelines.errors import LeaseHeld, RefusedPath
from pipelines.lease import LEASE_FILE, TTL_ENV, Holder, Lease, hold, read_holder
from pipelines.lifecycle import MARKER, StageRun, check_input_paths, check_run_dir, restore, run_stage, write_marker
from pipelines.stages import STAGES, Stage, is_up_to_date, read_manifest
from pipelines.storage import exists, filesystem, join, read_bytes, write_text

TOY = Stage("toy", f"{__name__}:build_toy", "a text file from data.seed", config_keys=("data.seed",),
            outputs=("out.txt",))
FAIL_SEED = 666  # the toy stage writes its output, then dies, as a killed run would


def build_toy(run: StageRun) -> dict:
    write_text(run.path("out.txt"), f"seed {run.config.data.seed}")
    if run.config.data.seed == FAIL_SEED:
        raise RuntimeError("killed midway")
    return {"seed": run.config.data.seed}


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(STAGES, "toy", TOY)


@pytest.fixture(params=["local", "s3"])
def run_root(request, tmp_path):
    """A place for run_dirs: a local folder, or a fresh bucket on the session's moto server."""
    if request.param == "local":
        return str(tmp_path)
    request.getfixturevalue("s3_endpoint")
    bucket = f"lifecycle-{os.getpid()}-{time.monotonic_ns() % 10**9}"
    filesystem(f"s3://{bucket}/x")[0].mkdir(bucket)
    return f"s3://{bucket}/runs"


def configure(run_dir, seed=1, *overrides):
    return load_config(overrides=[f"run_dir={run_dir}", f"data.seed={seed}", *overrides])


def toy_output(run_dir, where="toy"):
    return read_bytes(join(run_dir, where, "out.txt")).decode()


# ---- ownership -----------------------------------------------------------------------------------

@pytest.mark.parametrize("run_dir, why", [("/", "a filesystem root"), ("~", "the home folder"),
                                          (os.path.expanduser("~"), "the home folder"),
                                          ("s3://bucket", "a bucket root"), ("s3://bucket/", "a bucket root")])
def test_roots_and_home_are_refused(run_dir, why, toy):
    with pytest.raises(RefusedPath, match=why):
        check_run_dir(run_dir)
    with pytest.raises(RefusedPath, match=why):
        run_stage(configure(run_dir), "toy")


def test_a_user_folder_in_the_run_dir_is_refused_and_left_intact(tmp_path, toy):
    run_dir = tmp_path / "run"
    (run_dir / "toy").mkdir(parents=True)
    (run_dir / "toy" / "notes.txt").write_text("mine")
    with pytest.raises(RefusedPath, match=r"it holds toy/; refusing to write there"):
        run_stage(configure(run_dir), "toy")
    # in a run_dir of ours, a stage folder that is not ours is refused too, naming it
    write_marker(str(run_dir), "run")
    with pytest.raises(RefusedPath, match=rf"{run_dir}/toy exists but is not the toy stage's"):
        run_stage(configure(run_dir), "toy")
    assert (run_dir / "toy" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (run_dir / "toy").iterdir()) == ["notes.txt"]


def test_a_folder_of_our_outputs_only_is_adopted(tmp_path, toy):
    run_stage(configure(tmp_path / "a"), "toy")
    (tmp_path / "b").mkdir()
    os.rename(tmp_path / "a" / "toy", tmp_path / "b" / "toy")  # e.g. a stage output copied into a new run_dir
    assert run_stage(configure(tmp_path / "b"), "toy").skipped
    assert not (tmp_path / "b" / MARKER).exists()  # a skip writes nothing
    run_stage(configure(tmp_path / "b", 2), "toy")
    assert toy_output(str(tmp_path / "b")) == "seed 2" and toy_output(str(tmp_path / "b"), "_previous/toy") == "seed 1"
    assert json.loads((tmp_path / "b" / MARKER).read_text())["kind"] == "run"


def test_inputs_inside_outputs_a_run_replaces_are_refused(tmp_path):
    run = tmp_path / "run"
    for folder in ("vocab", "pretrain/hf", "_previous/pretrain/hf", "finetune/best"):
        (run / folder).mkdir(parents=True)
    (run / "vocab" / "spiece.model").write_bytes(b"x")
    refused = {"vocab.model": f"{run}/vocab/spiece.model", "train.init_from": f"{run}/pretrain/hf",
               "finetune.pretrained": f"{run}/_previous/pretrain/hf"}
    stage_of = {"vocab.model": "vocab", "train.init_from": "pretrain", "finetune.pretrained": "finetune"}
    for key, path in refused.items():
        with pytest.raises(RefusedPath, match=rf"{key}={path}: lies inside "):
            check_input_paths(load_config(overrides=[f"run_dir={run}", f"{key}={path}"]), [stage_of[key]])
    with pytest.raises(RefusedPath, match="finetune.pretrained=.*lies inside .*/finetune"):
        check_input_paths(load_config(overrides=[f"run_dir={run}", f"finetune.pretrained={run}/finetune/best"]),
                          ["finetune"])
    with pytest.raises(RefusedPath, match="corpus.paths=.*holds run_dir"):
        check_input_paths(load_config(overrides=[f"run_dir={run}", f"corpus.paths=[{tmp_path}]"]), ["data"])
    (run / "data").mkdir()
    with pytest.raises(RefusedPath, match="corpus.paths=.*lies inside .*/data, which"):
        check_input_paths(load_config(overrides=[f"run_dir={run}", f"corpus.paths=[{run}/data]"]), ["data"])
    # an earlier stage's output is a fine input: the pretrain export for fine-tuning
    check_input_paths(load_config(overrides=[f"run_dir={run}", f"finetune.pretrained={run}/pretrain/hf"]),
                      ["finetune"])


# ---- generations ---------------------------------------------------------------------------------

def test_replaced_only_on_success_with_one_previous_generation(run_root, toy):
    run_dir = join(run_root, "run")
    first = run_stage(configure(run_dir, 1), "toy")
    manifest = read_manifest(configure(run_dir, 1), "toy")
    assert not first.skipped and toy_output(run_dir) == "seed 1" and manifest["seed"] == 1

    with pytest.raises(RuntimeError, match="killed midway"):
        run_stage(configure(run_dir, FAIL_SEED), "toy")
    assert toy_output(run_dir) == "seed 1" and read_manifest(configure(run_dir), "toy") == manifest
    assert is_up_to_date(configure(run_dir, 1), "toy")
    assert exists(join(run_dir, "_building", "toy", "out.txt"))  # the unfinished attempt, beside

    run_stage(configure(run_dir, 2), "toy")  # discards the unfinished build of another config
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
    run_stage(configure(run_dir, 3), "toy")
    assert toy_output(run_dir) == "seed 3" and toy_output(run_dir, "_previous/toy") == "seed 2"  # one generation
    assert not exists(join(run_dir, "_building", "toy"))

    assert restore(configure(run_dir), "toy") == join(run_dir, "toy")
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 3"
    assert is_up_to_date(configure(run_dir, 2), "toy")
    restore(configure(run_dir), "toy")  # and back
    assert toy_output(run_dir) == "seed 3" and toy_output(run_dir, "_previous/toy") == "seed 2"


def test_an_interrupted_swap_is_finished_by_the_next_run(run_root, toy, monkeypatch):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    real_move, calls = lifecycle.move_tree, []

    def crash_in_second_move(src, dst, first=(), last=()):
        calls.append(src)
        if len(calls) < 2:
            return real_move(src, dst, first, last)
        fs, s = filesystem(src)  # moves one object (the first in order), then the process dies
        if "://" in src:
            name = first[0]
            fs.copy(f"{s}/{name}", f"{filesystem(dst)[1]}/{name}")
            fs.rm(f"{s}/{name}")
        raise KeyboardInterrupt("killed during the swap")

    monkeypatch.setattr(lifecycle, "move_tree", crash_in_second_move)
    with pytest.raises(KeyboardInterrupt):
        run_stage(configure(run_dir, 2), "toy")
    monkeypatch.setattr(lifecycle, "move_tree", real_move)
    assert read_manifest(configure(run_dir), "toy") is None  # mid-swap: no current output
    assert exists(join(run_dir, "_swap.json"))
    run_stage(configure(run_dir, 2), "toy")  # finishes the journal, then finds the output up to date
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
    assert read_manifest(configure(run_dir), "toy")["seed"] == 2 and not exists(join(run_dir, "_swap.json"))


def test_a_truncated_manifest_is_redone_with_a_warning(run_root, toy, capsys):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir), "toy")
    path = join(run_dir, "toy", "manifest.json")
    write_text(path, read_bytes(path).decode()[:25])
    assert not is_up_to_date(configure(run_dir), "toy")
    assert f"warning: {path} is unreadable (JSONDecodeError)" in capsys.readouterr().out
    outcome = run_stage(configure(run_dir), "toy")
    assert not outcome.skipped and read_manifest(configure(run_dir), "toy")["seed"] == 1
    write_text(path, "[]")
    assert read_manifest(configure(run_dir), "toy") is None


def test_a_sixth_stage_shows_in_the_dag(tmp_path, toy):
    from pipelines import full_run

    config = configure(tmp_path / "run")
    selected, forced = full_run.select_stages("toy", None)
    plans = {p.name: p for p in full_run.plan_dag(config, selected, forced)}
    assert plans["toy"].status == "runs: no output yet"
    assert plans["toy"].outputs == [f"{tmp_path}/run/toy/out.txt", f"{tmp_path}/run/toy/manifest.json"]
    run_stage(config, "toy")
    assert {p.name: p.status for p in full_run.plan_dag(config, selected, forced)}["toy"] == "up to date: skipped"


# ---- the lease -----------------------------------------------------------------------------------

def test_a_second_run_is_refused_while_the_first_holds_the_run_dir(run_root, toy):
    run_dir = join(run_root, "run")
    lifecycle.ensure_run_dir(run_dir)
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
    lifecycle.ensure_run_dir(run_dir)
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
    lifecycle.ensure_run_dir(run_dir)
    gone = Holder("old", "elsewhere", 1, "python -m pipelines.data", None, 0.0, time.time() - 1000, 120.0)
    write_text(join(run_dir, LEASE_FILE), gone.encode().decode())
    with hold(run_dir) as lease:
        assert read_holder(run_dir)[0].owner == lease.holder.owner
    assert "taking over the lease" in caplog.text
    dead = Holder("dead", os.uname().nodename, 2**22 + 12345, "python -m pipelines.data", None, 0.0, time.time(),
                  120.0)  # this host, a fresh heartbeat, but no such process
    write_text(join(run_dir, LEASE_FILE), dead.encode().decode())
    with hold(run_dir):
        pass


def test_a_run_that_lost_its_lease_commits_nothing(run_root, toy, monkeypatch):
    monkeypatch.setenv(TTL_ENV, "0.6")  # renewed every 0.1 s
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    thief = Holder("thief", "elsewhere", 1, "another run", None, time.time(), time.time() + 3600, 120.0)

    def steal_then_build(run):
        write_text(join(run_dir, LEASE_FILE), thief.encode().decode())
        time.sleep(0.5)  # the renewer notices
        return build_toy(run)

    monkeypatch.setattr(lifecycle, "run_function", lambda name: steal_then_build)
    with pytest.raises(LeaseHeld, match="taken over by `another run`"):
        run_stage(configure(run_dir, 2), "toy")
    assert toy_output(run_dir) == "seed 1"
    assert read_holder(run_dir)[0].owner == "thief"  # the thief's lease is left alone


def test_no_pickle_in_the_project():
    root = Path(__file__).resolve().parents[2]
    offenders = []
    for folder in ("pipelines", "albert_model", "bench"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            if "weights_only=False" in text or "import pickle" in text or "pickle.load" in text:
                offenders.append(str(path.relative_to(root)))
    assert offenders == []
