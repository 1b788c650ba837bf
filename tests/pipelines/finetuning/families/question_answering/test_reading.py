"""Reading QA files: the official SQuAD v1.1/v2.0 JSON and flat jsonl/parquet rows, every bad row
counted under its reason and named by file and place, clear errors for files that are not QA files,
local and s3://."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.errors import BadInput, MissingInput
from pipelines.finetuning.families.question_answering.features import QAExample
from pipelines.finetuning.families.question_answering.metrics import read_squad_golds
from pipelines.finetuning.families.question_answering.reading import flat_row, golds_of, read_qa_file
from pipelines.storage import filesystem

CONTEXT = "Marie Curie won the Nobel Prize in 1903 and again in 1911."


def qa(qid, question="When did she win?", answers=(("1903", 35),), **extra):
    return {"id": qid, "question": question, "answers": [{"text": t, "answer_start": s} for t, s in answers], **extra}


def squad(articles, version="1.1"):
    return {"version": version, "data": articles}


def article(*paragraphs, title="Curie"):
    return {"title": title, "paragraphs": list(paragraphs)}


def paragraph(*qas, context=CONTEXT):
    return {"context": context, "qas": list(qas)}


def write_json(path, document):
    path.write_text(json.dumps(document))
    return str(path)


def test_squad_v1_reads_good_questions_and_counts_each_bad_kind(tmp_path):
    bad_type = qa("q4")
    bad_type["answers"][0]["answer_start"] = "35"
    no_question = qa("q3")
    del no_question["question"]
    document = squad(
        [
            article(
                paragraph(
                    qa("q1", answers=(("1903", 35), ("in 1903", 32))),
                    qa("q2", "And again?", answers=(("1911", 53),)),
                    no_question,
                    bad_type,
                    qa("q5", answers=(("1903", 36),)),
                    qa("q6", question="   "),
                    qa("q1"),
                    qa("q7", answers=()),
                ),
                paragraph(qa("q8"), context=" \n"),
                paragraph(qa("q9"), context=["not", "text"]),
            ),
            {"title": "no paragraphs"},
            article({"context": CONTEXT}),
        ]
    )
    path = write_json(tmp_path / "train-v1.1.json", document)
    result = read_qa_file(path)
    assert result.examples == [
        QAExample("q1", "When did she win?", CONTEXT, (("1903", 35), ("in 1903", 32))),
        QAExample("q2", "And again?", CONTEXT, (("1911", 53),)),
    ]
    assert not result.version_2
    assert dict(result.rejected) == {
        "missing_field": 3,
        "wrong_type": 2,
        "answer_start_mismatch": 1,
        "empty_question": 1,
        "duplicate_id": 1,
        "malformed_answers": 1,
        "empty_context": 1,
    }
    named = result.rejection_examples
    assert named["missing_field"] == [
        f"{path} data[0].paragraphs[0].qas[2] (id 'q3'): no 'question'",
        f"{path} data[1]: no 'paragraphs'",
        f"{path} data[2].paragraphs[0]: no 'qas'",
    ]
    assert named["wrong_type"] == [
        f"{path} data[0].paragraphs[0].qas[3] (id 'q4'): answers[0].answer_start is a string, not an integer",
        f"{path} data[0].paragraphs[2].qas[0] (id 'q9'): 'context' in its paragraph is a list, not a string",
    ]
    assert named["answer_start_mismatch"] == [
        f"{path} data[0].paragraphs[0].qas[4] (id 'q5'): answer '1903' at 36, where the context has '903 '"
    ]
    assert named["duplicate_id"] == [
        f"{path} data[0].paragraphs[0].qas[6] (id 'q1'): id 'q1' is already used at data[0].paragraphs[0].qas[0]"
    ]
    assert named["malformed_answers"] == [
        f"{path} data[0].paragraphs[0].qas[7] (id 'q7'): no answers, and 'is_impossible' is not true"
    ]
    assert named["empty_context"][0].startswith(f"{path} data[0].paragraphs[1].qas[0] (id 'q8')")
    summary = result.summary()
    assert summary["read"] == 12 == summary["usable"] + sum(summary["rejected"].values())


def test_squad_v2_unanswerable_questions_ignore_plausible_answers(tmp_path):
    impossible = qa("u1", "When did he win?", answers=(), is_impossible=True)
    impossible["plausible_answers"] = [{"text": "1903", "answer_start": 35}]
    document = squad(
        [
            article(
                paragraph(
                    qa("a1", is_impossible=False),
                    impossible,
                    qa("u2", answers=(("1903", 35),), is_impossible=True),
                    qa("u3", answers=(), is_impossible="yes"),
                )
            )
        ],
        version="v2.0",
    )
    path = write_json(tmp_path / "dev-v2.0.json", document)
    result = read_qa_file(path)
    assert [(e.id, e.answers) for e in result.examples] == [("a1", (("1903", 35),)), ("u1", ())]
    assert result.version_2
    assert dict(result.rejected) == {"malformed_answers": 1, "wrong_type": 1}
    assert result.rejection_examples["malformed_answers"] == [
        f"{path} data[0].paragraphs[0].qas[2] (id 'u2'): 'is_impossible' is true but it has 1 answers"
    ]
    assert result.summary()["unanswerable"] == 1
    good = squad([article(paragraph(qa("a1"), impossible))], version="v2.0")
    assert golds_of(read_qa_file(write_json(tmp_path / "good.json", good)).examples) == read_squad_golds(good)


def test_version_2_follows_the_file_or_an_unanswerable_question(tmp_path):
    answerable = [article(paragraph(qa("a1")))]
    assert read_qa_file(write_json(tmp_path / "v2.json", squad(answerable, "v2.0"))).version_2
    assert not read_qa_file(write_json(tmp_path / "v1.json", squad(answerable, "1.1"))).version_2
    with_null = [article(paragraph(qa("a1"), qa("u1", answers=(), is_impossible=True)))]
    assert read_qa_file(write_json(tmp_path / "no_version.json", {"data": with_null})).version_2


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"data": [', r"bad\.json: not valid JSON"),
        ('[{"id": "q1"}]', r"bad\.json: not a SQuAD file: it has no top-level 'data' list"),
        ('{"version": "1.1", "data": {}}', r"bad\.json: not a SQuAD file"),
        ('{"data": [{"paragraphs": [{"context": "x", "qas": []}]}]}', r"bad\.json: the file has no questions"),
    ],
)
def test_a_file_that_is_no_squad_file_is_one_error_naming_it(tmp_path, content, message):
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(BadInput, match=message):
        read_qa_file(str(tmp_path / "bad.json"))


def test_missing_file_and_unknown_format_are_errors(tmp_path):
    with pytest.raises(MissingInput, match=r"nowhere\.json: no such file"):
        read_qa_file(str(tmp_path / "nowhere.json"))
    (tmp_path / "qa.csv").write_text("id,question\n")
    with pytest.raises(BadInput, match=r"qa\.csv: unknown QA file format"):
        read_qa_file(str(tmp_path / "qa.csv"))


def flat(qid, question="When did she win?", context=CONTEXT, texts=("1903",), starts=(35,)):
    return {"id": qid, "question": question, "context": context, "answers": {"text": texts, "answer_start": starts}}


def test_flat_jsonl_rows_are_named_by_line(tmp_path):
    lines = [
        json.dumps(flat("f1")),
        json.dumps(flat(7, texts=[], starts=[])),
        "",
        '{"id": "f3", "question": ',
        json.dumps(["not", "an", "object"]),
        json.dumps(flat("f4", texts=["1903", "1911"], starts=[35])),
        json.dumps(flat(True)),
        json.dumps({k: v for k, v in flat("f5").items() if k != "answers"}),
        json.dumps(flat("f6", context="  ")),
        json.dumps(flat("f1", question="Again?")),
        json.dumps(flat("f7", texts=[" "], starts=[0])),
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(lines) + "\n")
    result = read_qa_file(str(path))
    assert result.examples == [
        QAExample("f1", "When did she win?", CONTEXT, (("1903", 35),)),
        QAExample("7", "When did she win?", CONTEXT, ()),
    ]
    assert result.version_2
    assert dict(result.rejected) == {
        "malformed_json": 1,
        "wrong_type": 2,
        "malformed_answers": 1,
        "missing_field": 1,
        "empty_context": 1,
        "duplicate_id": 1,
        "empty_answer": 1,
    }
    named = result.rejection_examples
    assert named["malformed_json"][0].startswith(f"{path} line 4: not JSON (")
    assert named["wrong_type"] == [
        f"{path} line 5: the row is a list, not an object",
        f"{path} line 7: 'id' is true/false, not a string",
    ]
    assert named["malformed_answers"] == [f"{path} line 6 (id 'f4'): 2 answers.text but 1 answers.answer_start"]
    assert named["missing_field"] == [f"{path} line 8 (id 'f5'): no 'answers'"]
    assert named["duplicate_id"] == [f"{path} line 10 (id 'f1'): id 'f1' is already used at line 1"]
    assert named["empty_answer"] == [f"{path} line 11 (id 'f7'): a blank answer at 0"]
    assert result.read == 10


def test_flat_parquet_rows_are_named_by_row(tmp_path):
    rows = [flat("p1"), flat("p2", texts=["1911"], starts=[0]), flat("p3", texts=[], starts=[])]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "dev.parquet")
    result = read_qa_file(str(tmp_path / "dev.parquet"))
    assert [(e.id, e.answers) for e in result.examples] == [("p1", (("1903", 35),)), ("p3", ())]
    assert result.rejection_examples == {
        "answer_start_mismatch": [
            f"{tmp_path}/dev.parquet row 1 (id 'p2'): answer '1911' at 0, where the context has 'Mari'"
        ]
    }
    pq.write_table(pa.table({"id": ["x"], "question": ["q"]}), tmp_path / "partial.parquet")
    with pytest.raises(BadInput, match=r"partial\.parquet: no column 'context', 'answers'; QA rows need"):
        read_qa_file(str(tmp_path / "partial.parquet"))


def test_flat_rows_round_trip_and_golds_match_the_official_reader():
    examples = [
        QAExample("a", "When?", CONTEXT, (("1903", 35), ("1911", 53))),
        QAExample("b", "Who?", CONTEXT, ()),
    ]
    assert flat_row(examples[0])["answers"] == {"text": ["1903", "1911"], "answer_start": [35, 53]}
    assert golds_of(examples) == {"a": ["1903", "1911"], "b": []}
    with pytest.raises(ValueError, match="'a' appears twice"):
        golds_of(examples + examples[:1])


def test_squad_json_and_jsonl_on_s3(s3_endpoint):
    fs, _ = filesystem("s3://qa-tables/x")
    fs.mkdir("qa-tables")
    document = squad([article(paragraph(qa("s1"), qa("s2", answers=(), is_impossible=True)))], version="v2.0")
    fs.pipe_file("qa-tables/dev-v2.0.json.gz", gzip.compress(json.dumps(document).encode()))
    fs.pipe_file("qa-tables/train.jsonl", (json.dumps(flat("j1")) + "\n" + json.dumps(flat("j1")) + "\n").encode())
    on_s3 = read_qa_file("s3://qa-tables/dev-v2.0.json.gz")
    assert [e.id for e in on_s3.examples] == ["s1", "s2"] and on_s3.version_2
    rows = read_qa_file("s3://qa-tables/train.jsonl")
    assert [e.id for e in rows.examples] == ["j1"]
    assert rows.rejection_examples == {
        "duplicate_id": ["s3://qa-tables/train.jsonl line 2 (id 'j1'): id 'j1' is already used at line 1"]
    }
