"""Paths named by files the product reads (swap journals, publish markers) and the run_dir's own
folders (`_previous/`, `_building/`) acted on only inside their folder: crafted journals and markers,
and links at any component, change nothing outside (pipelines/storage/contained.py)."""

import json
import os
import shutil
from pathlib import Path

import pytest

from pipelines.errors import RefusedPath, UserError
from pipelines.rundir import lifecycle
from pipelines.rundir.generations import restore
from pipelines.rundir.lifecycle import run_stage
from pipelines.rundir.publish import PUBLISHED
from pipelines.rundir.registry import STAGES
from pipelines.storage import join, write_text

from .toy_stage import TOY, configure, toy_output


def tree(folder: Path) -> dict[str, object]:
    """Every entry below `folder`: a file's bytes, a link's target, a folder as None."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(folder))
            found[rel] = (
                ("link", os.readlink(path)) if path.is_symlink() else None if path.is_dir() else path.read_bytes()
            )
    return found


@pytest.fixture
def published_toy(monkeypatch):
    """The toy stage with a publish target (predict.output), as the predict stage has."""
    monkeypatch.setitem(STAGES, "toy", TOY.__class__(**{**TOY.__dict__, "publish": "predict.output"}))


def journal(*ops) -> str:
    return json.dumps({"stage": "toy", "action": "commit", "ops": list(ops), "done": 0, "fenced": True})


def test_a_two_step_journal_cannot_carry_a_relative_link_out_of_the_run_dir(tmp_path, toy):
    """A relative link `_building/N -> ../toy` resolves to the run's own `toy/` where it lies, and
    to the sibling run_dir `toy` once moved one level up to `_previous`: the journal's second step
    would then delete the sibling's output."""
    sibling, run_dir = tmp_path / "toy", tmp_path / "exp1"
    run_stage(configure(sibling), "toy")
    run_stage(configure(run_dir), "toy")
    os.symlink("../toy", run_dir / "_building" / "N")
    write_text(
        join(str(run_dir), "_swap.json"),
        journal({"op": "move", "src": "_building/N", "dst": "_previous"}, {"op": "delete", "path": "_previous/toy"}),
    )
    before = tree(sibling)
    for attempt in (lambda: restore(configure(run_dir), "toy"), lambda: run_stage(configure(run_dir, 2), "toy")):
        with pytest.raises(UserError, match=r"_swap.json: src='_building/N' .*symbolic link.*nothing was moved"):
            attempt()
    assert tree(sibling) == before and toy_output(str(sibling)) == "seed 1"
    assert toy_output(str(run_dir)) == "seed 1" and (run_dir / "_building" / "N").is_symlink()


def test_a_forged_publish_marker_deletes_nothing_outside_its_folder(tmp_path, toy, published_toy):
    run_dir, output, victims = tmp_path / "run", tmp_path / "published", tmp_path / "victims"
    victims.mkdir()
    (victims / "abs.txt").write_text("keep")
    (victims / "rel.txt").write_text("keep")
    (victims / "linked.txt").write_text("keep")
    run_stage(configure(run_dir, 1, f"predict.output={output}"), "toy")
    marker = json.loads((output / PUBLISHED).read_text())
    os.symlink(victims, output / "sub")
    for forged in ([str(victims / "abs.txt")], ["../victims/rel.txt"], ["sub/linked.txt"]):
        (output / PUBLISHED).write_text(json.dumps({**marker, "files": [*marker["files"], *forged]}))
        with pytest.raises(RefusedPath, match=rf"{PUBLISHED}: .*{forged[0].split('/')[-1]}"):
            run_stage(configure(run_dir, 2, f"predict.output={output}"), "toy")
        assert {p.name: p.read_text() for p in victims.iterdir()} == dict.fromkeys(
            ("abs.txt", "rel.txt", "linked.txt"), "keep"
        )
        assert (output / "out.txt").read_text() == "seed 1"  # refused before anything was replaced


def test_a_published_folder_with_a_link_is_not_written_through(tmp_path, toy, published_toy):
    run_dir, output, victims = tmp_path / "run", tmp_path / "published", tmp_path / "victims"
    victims.mkdir()
    output.mkdir()
    os.symlink(victims / "out.txt", output / "out.txt")  # a link where a published file goes
    write_text(str(output / PUBLISHED), json.dumps({"run_dir": str(run_dir.resolve()), "files": ["out.txt"]}))
    with pytest.raises(RefusedPath, match=r"'out.txt' is or goes through a symbolic link"):
        run_stage(configure(run_dir, 1, f"predict.output={output}"), "toy")
    assert list(victims.iterdir()) == []


def test_previous_as_a_link_to_an_outside_folder_is_refused_by_restore(tmp_path, toy):
    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_stage(configure(run_dir, 1), "toy")
    run_stage(configure(run_dir, 2), "toy")
    shutil.copytree(run_dir / "_previous", elsewhere, symlinks=True)
    shutil.rmtree(run_dir / "_previous")
    os.symlink(elsewhere, run_dir / "_previous")
    before, current = tree(elsewhere), tree(run_dir / "toy")
    with pytest.raises(RefusedPath, match=r"_previous/toy.* symbolic link \(_previous\)"):
        restore(configure(run_dir), "toy")
    assert tree(elsewhere) == before and tree(run_dir / "toy") == current


def test_a_predict_output_naming_a_file_is_one_line(tmp_path, toy, published_toy):
    (tmp_path / "file.txt").write_text("mine")
    with pytest.raises(RefusedPath, match=r"predict.output=.*file.txt: a file, not a folder"):
        run_stage(configure(tmp_path / "run", 1, f"predict.output={tmp_path / 'file.txt'}"), "toy")
    assert (tmp_path / "file.txt").read_text() == "mine"


@pytest.mark.parametrize("marker", ["{not json", '["a list"]', '{"files": "out.txt", "run_dir": 1}'])
def test_an_unreadable_publish_marker_is_one_line(tmp_path, toy, published_toy, marker):
    output = tmp_path / "published"
    output.mkdir()
    (output / PUBLISHED).write_text(marker)
    with pytest.raises(UserError, match=rf"{PUBLISHED}"):
        run_stage(configure(tmp_path / "run", 1, f"predict.output={output}"), "toy")
    assert sorted(os.listdir(output)) == [PUBLISHED]


def test_lifecycle_deletes_refuse_a_linked_building_folder(tmp_path, toy, monkeypatch):
    """`_building/<stage>` replaced by a link (after the ownership checks ran): the lifecycle's own
    delete of a discarded build removes nothing it points to."""
    run_dir, victims = tmp_path / "run", tmp_path / "victims"
    victims.mkdir()
    (victims / "keep.txt").write_text("keep")
    run_stage(configure(run_dir, 1), "toy")
    monkeypatch.setattr(lifecycle, "refuse_unowned", lambda folder, stage=None: None)
    monkeypatch.setattr(lifecycle, "read_marker", lambda folder: {"forced_by": "another run"})
    os.symlink(victims, run_dir / "_building" / "toy")
    with pytest.raises(RefusedPath, match="symbolic link"):
        run_stage(configure(run_dir, 2), "toy", force=True)
    assert (victims / "keep.txt").read_text() == "keep"
