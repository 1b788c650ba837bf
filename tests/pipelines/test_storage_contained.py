"""pipelines/storage/contained.py on its own: which relative paths it takes, links refused at every
component (checked as it acts, not once before), and the same refusals on s3:// (moto)."""

import os

import pytest

from pipelines.storage import exists, filesystem, join, write_text
from pipelines.storage.contained import Contained, Escape


@pytest.mark.parametrize("rel", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", 5, None])
def test_only_plain_relative_paths_are_taken(tmp_path, rel):
    with pytest.raises(Escape, match=r"^marker.json: "):
        Contained(str(tmp_path), "marker.json").parts(rel)


@pytest.mark.parametrize("where", ["a", "a/b", "a/b/c"])
def test_a_link_at_any_component_is_refused_and_nothing_behind_it_changes(tmp_path, where):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "b" / "c").mkdir(parents=True)
    (outside / "b" / "c" / "keep.txt").write_text("keep")
    (root / where).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside.joinpath(*where.split("/")[1:]), root / where)  # a/b/c still names outside/b/c
    inside = Contained(str(root), "journal")
    for act in (
        lambda: inside.delete("a/b/c"),
        lambda: inside.remove_file("a/b/c/keep.txt"),
        lambda: inside.move("a/b/c", "moved"),
        lambda: inside.path("a/b/c/keep.txt"),
        lambda: inside.read_bytes("a/b/c/keep.txt"),
    ):
        with pytest.raises(Escape, match="symbolic link"):
            act()
    with pytest.raises(Escape, match="symbolic link"), inside.open_write("a/b/c/keep.txt") as f:
        f.write(b"changed")
    assert (outside / "b" / "c" / "keep.txt").read_text() == "keep"


def test_each_action_walks_again(tmp_path):
    """A path checked before a link replaced one of its folders is refused when it is acted on."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "a" / "b").mkdir(parents=True)
    (outside / "b").mkdir(parents=True)
    (outside / "b" / "keep.txt").write_text("keep")
    inside = Contained(str(root), "journal")
    assert inside.path("a/b") == str(root / "a" / "b")
    os.rename(root / "a", tmp_path / "moved-away")
    os.symlink(outside, root / "a")
    with pytest.raises(Escape, match=r"'a/b' is or goes through a symbolic link \(a\)"):
        inside.delete("a/b")
    assert (outside / "b" / "keep.txt").read_text() == "keep"


def test_delete_removes_links_inside_without_following_them_and_the_last_entries_last(tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "stage" / "sub").mkdir(parents=True)
    (root / "stage" / ".marker").write_text("ours")
    (root / "stage" / "sub" / "f.txt").write_text("x")
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    os.symlink(outside, root / "stage" / "sub" / "link")
    removed = []
    real_unlink = os.unlink
    monkeypatch.setattr(
        os, "unlink", lambda name, dir_fd=None: (removed.append(name), real_unlink(name, dir_fd=dir_fd))
    )
    Contained(str(root), "journal").delete("stage", last=[".marker"])
    assert not (root / "stage").exists() and (outside / "keep.txt").read_text() == "keep"
    assert removed[-1] == ".marker" and "link" in removed


def test_a_move_into_itself_or_onto_something_is_refused(tmp_path):
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    inside = Contained(str(root), "journal")
    with pytest.raises(Escape, match="cannot be moved into itself"):
        inside.move("a", "a/x")
    with pytest.raises(Escape, match="'b' already exists"):
        inside.move("a", "b")
    inside.move("a", "c/d")  # folders on the way are made
    assert (root / "c" / "d").is_dir() and not (root / "a").exists()
    inside.move("a", "e")  # an absent source: a move already done
    assert not (root / "e").exists()


def test_s3_takes_the_same_paths_and_stays_under_its_prefix(s3_endpoint):
    bucket = f"contained-{os.getpid()}"
    filesystem(f"s3://{bucket}/x")[0].mkdir(bucket)
    root, outside = f"s3://{bucket}/runs/run", f"s3://{bucket}/runs/other"
    write_text(join(outside, "keep.txt"), "keep")
    write_text(join(root, "stage", "f.txt"), "x")
    inside = Contained(root, "journal")
    for rel in ("../other/keep.txt", f"/{bucket}/runs/other/keep.txt", "stage/../../other/keep.txt"):
        with pytest.raises(Escape):
            inside.remove_file(rel)
    inside.move("stage", "_previous/stage")
    assert exists(join(root, "_previous", "stage", "f.txt")) and not exists(join(root, "stage", "f.txt"))
    with inside.open_write("published/out.txt") as f:
        f.write(b"y")
    assert inside.read_bytes("published/out.txt") == b"y"
    inside.delete("_previous/stage")
    assert not exists(join(root, "_previous", "stage", "f.txt")) and exists(join(outside, "keep.txt"))
