"""The stage lifecycle without Ray, on a toy sixth stage (tests/pipelines/toy_stage.py: one
declaration and its run function is all a stage needs): ownership and refusals, replace-on-success
with one previous generation, interrupted swaps, restore, truncated manifests, resumable builds,
locally and on s3:// (moto)."""

import json
import os

import pytest

from pipelines import storage
from pipelines.config import load_config
from pipelines.errors import MissingInput, RefusedPath
from pipelines.rundir import lifecycle
from pipelines.rundir.generations import restore
from pipelines.rundir.lifecycle import StageRun, run_stage
from pipelines.rundir.ownership import MARKER, check_input_paths, check_run_dir, owned, write_marker
from pipelines.rundir.registry import STAGES, Stage, is_up_to_date, read_manifest, read_manifest_at
from pipelines.storage import exists, filesystem, join, read_bytes, write_text
from pipelines.storage.contained import Contained

from . import toy_stage
from .toy_stage import FAIL_SEED, configure, toy_output

# ---- ownership -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "run_dir, why",
    [
        ("/", "a filesystem root"),
        ("~", "the home folder"),
        (os.path.expanduser("~"), "the home folder"),
        ("s3://bucket", "a bucket root"),
        ("s3://bucket/", "a bucket root"),
    ],
)
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
    refused = {
        "vocab.model": f"{run}/vocab/spiece.model",
        "train.init_from": f"{run}/pretrain/hf",
        "finetune.pretrained": f"{run}/_previous/pretrain/hf",
    }
    stage_of = {"vocab.model": "vocab", "train.init_from": "pretrain", "finetune.pretrained": "finetune"}
    for key, path in refused.items():
        with pytest.raises(RefusedPath, match=rf"{key}={path}: lies inside "):
            check_input_paths(load_config(overrides=[f"run_dir={run}", f"{key}={path}"]), [stage_of[key]])
    with pytest.raises(RefusedPath, match="finetune.pretrained=.*lies inside .*/finetune"):
        check_input_paths(
            load_config(overrides=[f"run_dir={run}", f"finetune.pretrained={run}/finetune/best"]), ["finetune"]
        )
    with pytest.raises(RefusedPath, match="corpus.paths=.*holds run_dir"):
        check_input_paths(load_config(overrides=[f"run_dir={run}", f"corpus.paths=[{tmp_path}]"]), ["data"])
    (run / "data").mkdir()
    with pytest.raises(RefusedPath, match="corpus.paths=.*lies inside .*/data, which"):
        check_input_paths(load_config(overrides=[f"run_dir={run}", f"corpus.paths=[{run}/data]"]), ["data"])
    # an earlier stage's output is a fine input: the pretrain export for fine-tuning
    check_input_paths(load_config(overrides=[f"run_dir={run}", f"finetune.pretrained={run}/pretrain/hf"]), ["finetune"])


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
    real_move, real_delete = Contained.move, storage._delete_objects

    def killed_midway(self, src, dst, **order):
        if not self.remote:  # a local move is one rename: killed right after it
            real_move(self, src, dst, **order)
            raise KeyboardInterrupt("killed during the swap")
        deletions = []

        def dying(path, objects):  # on S3, object by object: killed after two objects left the source
            deletions.append(objects)
            if len(deletions) > 2:
                raise KeyboardInterrupt("killed during the swap")
            return real_delete(path, objects)

        monkeypatch.setattr(storage, "_delete_objects", dying)
        real_move(self, src, dst, **order)

    monkeypatch.setattr(Contained, "move", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        run_stage(configure(run_dir, 2), "toy")  # killed while moving the current output aside
    monkeypatch.setattr(Contained, "move", real_move)
    monkeypatch.setattr(storage, "_delete_objects", real_delete)
    assert read_manifest(configure(run_dir), "toy") is None and exists(join(run_dir, "_swap.json"))
    if "://" in run_dir:  # the half-moved copy does not read as complete either, and both halves are ours
        assert read_manifest_at(join(run_dir, "_previous", "toy")) is None
        assert owned(join(run_dir, "toy"), "toy") and owned(join(run_dir, "_previous", "toy"), "toy")
    run_stage(configure(run_dir, 2), "toy")  # finishes the journal, then finds the output up to date
    assert toy_output(run_dir) == "seed 2" and toy_output(run_dir, "_previous/toy") == "seed 1"
    assert read_manifest(configure(run_dir), "toy")["seed"] == 2 and not exists(join(run_dir, "_swap.json"))
    assert read_manifest_at(join(run_dir, "_previous", "toy"))["seed"] == 1


def test_a_truncated_manifest_is_redone_with_a_warning(run_root, toy, capsys):
    run_dir = join(run_root, "run")
    run_stage(configure(run_dir, 1), "toy")
    run_stage(configure(run_dir, 2), "toy")
    path = join(run_dir, "toy", "manifest.json")
    write_text(path, read_bytes(path).decode()[:25])
    assert not is_up_to_date(configure(run_dir, 2), "toy")
    assert f"warning: {path} is unreadable (JSONDecodeError)" in capsys.readouterr().out
    outcome = run_stage(configure(run_dir, 2), "toy")
    assert not outcome.skipped and read_manifest(configure(run_dir), "toy")["seed"] == 2
    # the incomplete output is kept aside; the complete previous generation is left alone
    assert toy_output(run_dir, "_previous/toy.incomplete") == "seed 2"
    assert read_manifest_at(join(run_dir, "_previous", "toy"))["seed"] == 1
    write_text(path, "[]")
    assert read_manifest(configure(run_dir), "toy") is None


RESUMABLE = Stage(
    "toyr",
    f"{__name__}:build_resumable",
    "a resumable toy",
    config_keys=("train",),
    resumable=True,
    extends=("train.max_steps",),
)
BUILDS: list[tuple[int, bool]] = []


def build_resumable(run: StageRun) -> dict:
    BUILDS.append((run.config.train.max_steps, run.resumed))
    write_text(run.path("steps.txt"), str(run.config.train.max_steps))
    if run.config.data.seed == FAIL_SEED:
        raise RuntimeError("killed midway")
    return {}


def test_an_unfinished_build_is_resumed_or_set_aside_never_deleted(tmp_path, monkeypatch):
    monkeypatch.setitem(STAGES, "toyr", RESUMABLE)
    BUILDS.clear()
    run_dir = tmp_path / "run"

    def attempt(max_steps, *overrides, force=False):
        config = configure(run_dir, FAIL_SEED, f"train.max_steps={max_steps}", *overrides)
        with pytest.raises(RuntimeError, match="killed midway"):
            run_stage(config, "toyr", force=force)

    attempt(100)
    attempt(200)  # a raised max_steps resumes the same build
    attempt(50)  # a lowered one cannot: the build past it is set aside
    assert BUILDS == [(100, False), (200, True), (50, False)]
    assert (run_dir / "_previous" / "toyr.unfinished" / "steps.txt").read_text() == "200"
    attempt(60, "train.lr=0.5")  # another lineage: set aside again (replacing the older one)
    attempt(60, "train.lr=0.5", force=True)  # forced: start over, the unfinished one set aside
    assert BUILDS[3:] == [(60, False), (60, False)]
    assert (run_dir / "_previous" / "toyr.unfinished" / "steps.txt").read_text() == "60"


def test_a_forced_stage_retried_by_its_submission_is_not_redone(tmp_path, toy, monkeypatch):
    run_dir = tmp_path / "run"
    run_stage(configure(run_dir, 1), "toy")
    real_commit, built = lifecycle.commit, []

    def dies_once(run_dir, name, fence):
        monkeypatch.setattr(lifecycle, "commit", real_commit)
        raise KeyboardInterrupt("the task's worker died")

    monkeypatch.setattr(lifecycle, "commit", dies_once)
    monkeypatch.setattr(toy_stage, "build_toy", lambda run: built.append(1) or build_toy_text(run))
    with pytest.raises(KeyboardInterrupt):
        run_stage(configure(run_dir, 1), "toy", force="submission-1")
    assert not run_stage(configure(run_dir, 1), "toy", force="submission-1").skipped  # the retry commits
    assert built == [1]  # what the first attempt built, not built again
    assert run_stage(configure(run_dir, 1), "toy", force="submission-1").skipped  # done by this submission
    assert not run_stage(configure(run_dir, 1), "toy", force="submission-2").skipped and built == [1, 1]


def build_toy_text(run: StageRun) -> dict:
    write_text(run.path("out.txt"), f"seed {run.config.data.seed}")
    return {"seed": run.config.data.seed}


def test_links_and_folders_inside_outputs_are_never_ours(tmp_path, toy):
    other = tmp_path / "other"
    run_stage(configure(other), "toy")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "toy").symlink_to(other / "toy")  # reusing another run's output by a link
    with pytest.raises(RefusedPath, match="it holds toy/"):
        run_stage(configure(run_dir, 2), "toy")
    write_marker(str(run_dir), "run", run_id="x")
    with pytest.raises(RefusedPath, match=r"no .albert-ray.json marker naming it; it is a link"):
        run_stage(configure(run_dir, 2), "toy")
    assert toy_output(str(other)) == "seed 1" and sorted(os.listdir(other / "toy")) == [
        ".albert-ray.json",
        "config.yaml",
        "manifest.json",
        "out.txt",
    ]
    for inside in (other / "toy", other / "_building", other / "sub"):
        with pytest.raises(RefusedPath, match="run_dir=.*(output inside another run_dir|lies inside)"):
            check_run_dir(str(inside))


def test_a_missing_bucket_is_not_created(s3_endpoint, toy):
    with pytest.raises(MissingInput, match="bucket no-such-bucket-here does not exist"):
        run_stage(configure("s3://no-such-bucket-here/run"), "toy")
    assert not filesystem("s3://no-such-bucket-here")[0].exists("no-such-bucket-here")


def test_a_sixth_stage_shows_in_the_dag(tmp_path, toy):
    from pipelines.stages import dag

    config = configure(tmp_path / "run")
    selected, forced = dag.select_stages("toy", None)
    plans = {p.name: p for p in dag.plan_dag(config, selected, forced)}
    assert plans["toy"].status == "runs: no output yet"
    assert plans["toy"].outputs == [f"{tmp_path}/run/toy/out.txt", f"{tmp_path}/run/toy/manifest.json"]
    run_stage(config, "toy")
    assert {p.name: p.status for p in dag.plan_dag(config, selected, forced)}["toy"] == "up to date: skipped"
