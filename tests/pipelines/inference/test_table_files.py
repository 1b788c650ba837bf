"""predict.input's files, listed and each one's columns checked on the driver, so that what would
stop a read task is one line before Ray Data starts (issue #43: a missing column was one line
after ~170 lines of Ray tracebacks; an empty folder Ray's own traceback); a file of the family's
own format read by the family there too."""

import gzip

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.config import PredictSection
from pipelines.errors import BadInput, MissingInput
from pipelines.finetuning.families.classification.inference import INFERENCE
from pipelines.inference.columns import table_columns
from pipelines.inference.table_files import input_tables
from pipelines.storage import filesystem

COLUMNS = table_columns(PredictSection(), INFERENCE)


def test_every_table_file_below_the_folder_is_read_and_job_markers_skipped(tmp_path):
    folder = tmp_path / "tables"
    (folder / "sub").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    for name in ("a.csv", "_part.csv", ".hidden/c.jsonl", "sub/.d.tsv"):
        (folder / name).write_text("text\nhello\n")
    pq.write_table(pa.table({"text": ["x"]}), folder / "sub" / "b.parquet")
    (folder / "_SUCCESS").write_bytes(b"")
    (folder / "sub" / ".b.parquet.crc").write_bytes(b"\x00")
    tables = input_tables(str(folder), COLUMNS, INFERENCE)
    assert [f[len(tables.root) + 1 :] for f in tables.files] == [
        ".hidden/c.jsonl",
        "_part.csv",
        "a.csv",
        "sub/.d.tsv",
        "sub/b.parquet",
    ]
    assert tables.skipped == ["_SUCCESS", "sub/.b.parquet.crc"]
    single = input_tables(str(folder / "a.csv"), COLUMNS, INFERENCE)
    assert (single.root, single.files, single.skipped) == (str(folder / "a.csv"), [str(folder / "a.csv")], [])


def test_what_no_read_task_could_read_is_one_error_naming_the_file(tmp_path):
    empty, markers, other = tmp_path / "empty", tmp_path / "markers", tmp_path / "other"
    for folder in (empty, markers, other):
        folder.mkdir()
    (markers / "_SUCCESS").write_bytes(b"")
    (other / "a.csv").write_text("text\nhello\n")
    (other / "notes.txt").write_text("mine")
    (tmp_path / "t.parquet.gz").write_bytes(gzip.compress(b"PAR1"))
    (tmp_path / "t.csv").write_text("text,x\nhello,1\n")
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "pq" / "a.parquet")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "pq" / "b.parquet")
    cases = [
        (empty, COLUMNS, f"predict.input: {empty} holds no files"),
        (markers, COLUMNS, f"predict.input: {markers} holds no table files \\(skipped: _SUCCESS\\)"),
        (other, COLUMNS, f"{other}/notes.txt: unknown table format; use a file ending in .csv"),
        (tmp_path / "t.parquet.gz", COLUMNS, "t.parquet.gz: a gzipped parquet file"),
        (
            tmp_path / "t.csv",
            table_columns(PredictSection(label_column="gold"), INFERENCE),
            r"t.csv: no column 'gold' \(predict.label_column\)",
        ),
        (tmp_path / "pq", COLUMNS, f"{tmp_path}/pq/b.parquet: no column 'text' \\(predict.text_column\\)"),
    ]
    for path, columns, message in cases:
        with pytest.raises(BadInput, match=message):
            input_tables(str(path), columns, INFERENCE)
    with pytest.raises(MissingInput, match=f"predict.input: {tmp_path}/nowhere does not exist"):
        input_tables(str(tmp_path / "nowhere"), COLUMNS, INFERENCE)


def test_a_folder_on_s3_is_listed_and_named_as_s3(tmp_path, s3_endpoint):
    fs, _ = filesystem("s3://predict-tables/x")
    fs.mkdir("predict-tables")
    pq.write_table(pa.table({"text": ["x"]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "b.parquet")
    fs.put_file(str(tmp_path / "a.parquet"), "predict-tables/in/part-0.parquet")
    fs.pipe_file("predict-tables/in/_SUCCESS", b"")
    tables = input_tables("s3://predict-tables/in/", COLUMNS, INFERENCE)
    assert (tables.root, tables.files, tables.skipped) == (
        "predict-tables/in",
        ["predict-tables/in/part-0.parquet"],
        ["_SUCCESS"],
    )
    fs.put_file(str(tmp_path / "b.parquet"), "predict-tables/in/sub/part-1.parquet")
    with pytest.raises(BadInput, match="^s3://predict-tables/in/sub/part-1.parquet: no column 'text'"):
        input_tables("s3://predict-tables/in", COLUMNS, INFERENCE)


class Sentences:
    """A family's inference reading `.txt` files of its own (one row per line), gzipped or not (it
    gets a file's bytes as stored), and no other."""

    fields, required, output = ("text",), ("text",), {}
    file_suffixes = (".txt",)
    check_row = staticmethod(INFERENCE.check_row)

    def read_file(self, path: str, data: bytes) -> list[dict] | None:
        if path.endswith(".gz"):
            data = gzip.decompress(data)
        if data.startswith(b"#"):
            return None  # not this family's: then a table, which a .txt is not
        if not data.strip():
            raise BadInput(f"{path}: no sentences")
        return [{"text": line} for line in data.decode().splitlines()]


def test_a_file_of_the_familys_own_format_is_read_by_it_and_its_errors_are_one_line(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("one\ntwo\n")
    (folder / "b.csv").write_text("text\nhello\n")
    (folder / "_notes.txt.gz").write_bytes(gzip.compress(b"three\n"))  # its own format: not a skipped marker
    columns = table_columns(PredictSection(), Sentences())
    tables = input_tables(str(folder), columns, Sentences())
    relative = [f[len(tables.root) + 1 :] for f in tables.files]
    assert (relative, tables.skipped) == (["_notes.txt.gz", "a.txt", "b.csv"], [])
    assert tables.own == [str(folder / "_notes.txt.gz"), str(folder / "a.txt")]
    (folder / "c.txt").write_text("")
    with pytest.raises(BadInput, match=f"^{folder}/c.txt: no sentences$"):
        input_tables(str(folder), columns, Sentences())
    (folder / "c.txt").write_text("# a comment\n")
    with pytest.raises(BadInput, match=f"^{folder}/c.txt: unknown table format"):
        input_tables(str(folder), columns, Sentences())
    with pytest.raises(BadInput, match="a.txt: unknown table format"):  # a family without a format of its own
        input_tables(str(folder / "a.txt"), COLUMNS, INFERENCE)
