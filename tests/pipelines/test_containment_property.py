"""The containment property, driven by hypothesis: whatever a run_dir's swap journal and a published
folder's marker say, in whatever order, with links planted anywhere (relative or absolute, to
outside folders or back inside), restore, commit, resuming a build and publishing change nothing
outside the run_dir and the published folder. Each example either works or ends in an expected
error (UserError): nothing else escapes either."""

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.errors import UserError
from pipelines.rundir.generations import restore
from pipelines.rundir.lifecycle import run_stage
from pipelines.rundir.publish import PUBLISHED
from pipelines.rundir.registry import STAGES

from .test_containment import tree
from .toy_stage import FAIL_SEED, TOY, configure

# Where links are planted and what they point to: names of the run_dir's own layout, the published
# folder's, and targets that climb out relatively, absolutely, or stay inside.
PLACES = [
    "run/_building/N",
    "run/_building/toy",
    "run/_building",
    "run/_previous",
    "run/_previous/toy",
    "run/_previous/toy.restoring",
    "run/toy",
    "run/N",
    "published/sub",
    "published/out.txt",
    "published/manifest.json",
]
TARGETS = ["../outside", "../../outside", "../toy", "../outside/toy", "toy", ".", "{outside}", "{outside}/toy"]
# Paths a crafted journal or marker may name.
NAMES = [
    "toy",
    "N",
    "_building",
    "_previous",
    "_building/N",
    "_building/toy",
    "_previous/toy",
    "_previous/toy.x",
    "_previous/N",
    "../outside",
    "../outside/toy",
    "{outside}/toy",
    "_previous/../../outside",
    "toy/..",
    "sub/x.txt",
    "out.txt",
    "manifest.json",
    "../outside/x.txt",
    "{outside}/x.txt",
]
ACTIONS = ["run", "restore", "force", "resume", "publish"]

ops = st.one_of(
    st.builds(lambda p: {"op": "delete", "path": p}, st.sampled_from(NAMES)),
    st.builds(lambda s, d: {"op": "move", "src": s, "dst": d}, st.sampled_from(NAMES), st.sampled_from(NAMES)),
)
plans = st.fixed_dictionaries(
    {
        "links": st.lists(st.tuples(st.sampled_from(PLACES), st.sampled_from(TARGETS)), max_size=3),
        "journal": st.one_of(st.none(), st.lists(ops, min_size=1, max_size=4)),
        "done": st.integers(0, 4),
        "marker": st.one_of(st.none(), st.lists(st.sampled_from(NAMES), max_size=4)),
        "actions": st.lists(st.sampled_from(ACTIONS), min_size=1, max_size=3),
    }
)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A run_dir with a current and a previous toy output and an unfinished build, a folder it
    published to, and an outside folder holding a copy of a stage output (as another run's would)."""
    STAGES["toy"] = TOY
    try:
        base = tmp_path_factory.mktemp("template")
        run, published = base / "run", base / "published"
        run_stage(configure(run, 1, f"predict.output={published}"), "toy")
        run_stage(configure(run, 2), "toy")
        with pytest.raises(RuntimeError):
            run_stage(configure(run, FAIL_SEED), "toy")  # leaves an unfinished _building/toy
        published.mkdir()
        outside = base / "outside"
        shutil.copytree(run / "toy", outside / "toy")
        (outside / "x.txt").write_text("outside")
        return base
    finally:
        del STAGES["toy"]


def plant(base: Path, plan: dict) -> None:
    outside = str(base / "outside")
    for place, target in plan["links"]:
        path = base / place
        if any(p.is_symlink() or (p.exists() and not p.is_dir()) for p in path.parents if base in p.parents):
            continue  # never plant through an earlier link (the test itself would write outside)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target.format(outside=outside), path)
    run = base / "run"
    if plan["journal"] is not None and not (run / "_swap.json").is_symlink():
        journal = [{k: v.format(outside=outside) for k, v in op.items()} for op in plan["journal"]]
        done = min(plan["done"], len(journal))
        (run / "_swap.json").write_text(
            json.dumps({"stage": "toy", "action": "commit", "ops": journal, "done": done, "fenced": True})
        )
    marker = base / "published" / PUBLISHED
    if plan["marker"] is not None and not marker.parent.is_symlink() and marker.parent.is_dir():
        files = [f.format(outside=outside) for f in plan["marker"]]
        marker.write_text(json.dumps({"run_dir": str(run.resolve()), "stage": "toy", "files": files}))


def act(base: Path, action: str, monkeypatch) -> None:
    run, published = base / "run", base / "published"
    stage = TOY
    if action == "resume":
        stage = TOY.__class__(**{**TOY.__dict__, "resumable": True})
    if action == "publish":
        stage = TOY.__class__(**{**TOY.__dict__, "publish": "predict.output"})
    monkeypatch.setitem(STAGES, "toy", stage)
    if action == "restore":
        restore(configure(run), "toy")
    elif action == "publish":
        run_stage(configure(run, 3, f"predict.output={published}"), "toy")
    else:
        run_stage(configure(run, {"run": 4, "force": 2, "resume": 5}[action]), "toy", force=action == "force")


@settings(
    max_examples=int(os.environ.get("CONTAINMENT_EXAMPLES", "120")),
    deadline=None,
    database=None,  # nothing written into the checkout; a failure prints the example to reproduce it
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(plan=plans)
def test_nothing_outside_the_run_dir_or_the_published_folder_changes(template, tmp_path_factory, monkeypatch, plan):
    base = tmp_path_factory.mktemp("case")
    shutil.rmtree(base)
    shutil.copytree(template, base, symlinks=True)
    plant(base, plan)
    outside, names = tree(base / "outside"), sorted(os.listdir(base))
    for action in plan["actions"]:
        with contextlib.suppress(UserError):  # refused is fine; any other exception fails the test
            act(base, action, monkeypatch)
        assert tree(base / "outside") == outside, (action, plan)
        assert sorted(os.listdir(base)) == names, (action, plan)
    shutil.rmtree(base)
