"""predict.output: the committed predictions published to a folder outside the run_dir
(pipelines/rundir/publish.py), on the shared suite's multi-label export (`family_suite`): a copy
equal to the run_dir's, rewritten only when the output changes and only where this run_dir wrote
before; a folder holding anything else, or overlapping the run_dir or the input, is refused before
anything runs."""

import contextlib
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines.config import load_config
from pipelines.errors import RefusedPath
from pipelines.rundir.publish import PUBLISHED


def overrides(run_dir, model, table, output) -> list[str]:
    return [
        f"run_dir={run_dir}",
        f"predict.model={model}",
        f"predict.input={table}",
        f"predict.output={output}",
        "predict.max_seq_length=16",
    ]  # in process (rows this few): publishing is the same whatever wrote the output


def published_files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_predictions_are_published_outside_the_run_dir_and_rewritten_only_when_they_change(
    family_suite, tmp_path, capsys
):
    from pipelines.cli.run import main as run_main
    from pipelines.stages.predict import run_predict

    config_file, suite = family_suite
    model = suite / "finetune" / "topics" / "best"
    rows = (config_file.parent / "topics_eval.csv").read_text().splitlines()
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "all.csv").write_text("\n".join(rows) + "\n")
    (inputs / "few.csv").write_text("\n".join(rows[:4]) + "\n")
    run_dir, output = tmp_path / "run", tmp_path / "published"

    buffer = io.StringIO()  # the plan names the copy
    with contextlib.redirect_stdout(buffer):
        assert (
            run_main([*overrides(run_dir, model, inputs / "all.csv", output), "--stages", "predict", "--dry-run"]) == 0
        )
    assert f"      out: {output} (a copy: predict.output)" in buffer.getvalue()

    stage = Path(run_predict(load_config(overrides=overrides(run_dir, model, inputs / "all.csv", output))))
    assert f"predict: published to predict.output={output} (" in capsys.readouterr().out
    marker = json.loads((output / PUBLISHED).read_text())
    assert marker["state"] == "complete" and marker["run_dir"] == str(run_dir.resolve())
    assert published_files(output) == {*marker["files"], PUBLISHED}
    assert marker["files"][-1] == "manifest.json" and "config.yaml" in marker["files"]
    assert (output / "manifest.json").read_bytes() == (stage / "manifest.json").read_bytes()
    assert pq.read_table(output / "predictions").equals(pq.read_table(stage / "predictions"))
    assert json.loads((output / "manifest.json").read_text())["rows"]["read"] == len(rows) - 1

    # the same config again: the stage is up to date and the copy is left as it is
    before = {f: (output / f).stat().st_mtime_ns for f in published_files(output)}
    run_predict(load_config(overrides=overrides(run_dir, model, inputs / "all.csv", output)))
    assert f"predict: predict.output={output} already holds this output" in capsys.readouterr().out
    assert {f: (output / f).stat().st_mtime_ns for f in published_files(output)} == before

    # another input: republished; what the run wrote before is replaced, a file someone added is kept
    (output / "notes.txt").write_text("mine")
    old_parquet = {f for f in marker["files"] if f.startswith("predictions/")}
    run_predict(load_config(overrides=overrides(run_dir, model, inputs / "few.csv", output)))
    marker = json.loads((output / PUBLISHED).read_text())
    assert published_files(output) == {*marker["files"], PUBLISHED, "notes.txt"}
    assert (output / "notes.txt").read_text() == "mine"
    assert not (old_parquet - set(marker["files"])) & published_files(output)
    assert pq.read_table(output / "predictions").num_rows == 3
    assert json.loads((output / "manifest.json").read_text())["input"] == str(inputs / "few.csv")

    # another run_dir may not take over this one's publication: refused before anything runs
    other = tmp_path / "other-run"
    with pytest.raises(RefusedPath, match=f"published from run_dir={run_dir.resolve()}"):
        run_predict(load_config(overrides=overrides(other, model, inputs / "few.csv", output)))
    assert not (other / "predict").exists()


def test_a_folder_it_did_not_publish_or_that_overlaps_is_refused_before_anything_runs(family_suite, tmp_path):
    from pipelines.stages.predict import run_predict

    _, suite = family_suite
    model = suite / "finetune" / "topics" / "best"
    table = tmp_path / "in"  # a folder of tables
    table.mkdir()
    (table / "rows.csv").write_text("text\ngoal match today\n")
    run_dir, theirs = tmp_path / "run", tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "keep.csv").write_text("a user's file")
    cases = [
        (theirs, "holds files albert-ray did not publish \\(keep.csv\\); name an empty or new folder"),
        (run_dir / "exports", f"overlaps run_dir={run_dir}"),
        (table / "out", f"overlaps predict.input={table}"),
        (tmp_path, "overlaps run_dir="),
    ]
    for output, message in cases:
        with pytest.raises(RefusedPath, match=message):
            run_predict(load_config(overrides=overrides(run_dir, model, table, output)))
        assert not (run_dir / "predict").exists() and not (run_dir / "_building").exists()
    assert (theirs / "keep.csv").read_text() == "a user's file" and sorted(p.name for p in theirs.iterdir()) == [
        "keep.csv"
    ]


@pytest.mark.slow
def test_predictions_from_a_local_run_dir_are_published_to_s3(family_suite, s3_endpoint, tmp_path):
    from pipelines.stages.predict import run_predict
    from pipelines.storage import filesystem, read_bytes, read_json

    config_file, suite = family_suite
    model = suite / "finetune" / "topics" / "best"
    table = tmp_path / "rows.csv"
    table.write_text((config_file.parent / "topics_eval.csv").read_text())
    fs, _ = filesystem("s3://x/y")
    fs.mkdir("published-predictions")
    output = "s3://published-predictions/topics"
    stage = Path(run_predict(load_config(overrides=overrides(tmp_path / "run", model, table, output))))
    marker = read_json(f"{output}/{PUBLISHED}")
    assert marker["state"] == "complete"
    assert read_bytes(f"{output}/manifest.json") == (stage / "manifest.json").read_bytes()
    for rel in marker["files"]:
        assert read_bytes(f"{output}/{rel}") == (stage / rel).read_bytes(), rel
