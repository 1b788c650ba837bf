"""Question answering applied to unlabelled questions (predict's and serve's family side): on an
export with its record, the answers equal the finetune stage's evaluation of the same questions
(its predictions.json, with the threshold it chose, and postprocess at a threshold set by hand),
batched however the caller batches; the recorded windows are the ones used; every row is answered
or rejected with its reason; SQuAD files in and predictions.json out."""

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from albert_model import AlbertConfig
from albert_model.hf import load_hf_pretrained
from albert_model.model import AlbertForQuestionAnswering
from pipelines.config import FinetuneSection
from pipelines.errors import BadInput
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.families.question_answering.demo import bbc_qa_examples
from pipelines.finetuning.families.question_answering.features import QAExample, qa_windows
from pipelines.finetuning.families.question_answering.inference import INFERENCE, AnswerSearch
from pipelines.finetuning.families.question_answering.postprocess import postprocess
from pipelines.finetuning.families.question_answering.training import QUESTION_ANSWERING
from pipelines.finetuning.inference import ModelUse
from pipelines.finetuning.loop import predict
from pipelines.finetuning.tokenizer import PairTokenizer
from pipelines.storage.models import ModelUsage, applied_length, read_model_config, read_usage, save_model
from tests.conftest import VOCAB_SIZE

LENGTHS = {"max_seq_length": 64, "max_query_length": 16, "doc_stride": 24}


def squad(examples, version="v2.0"):
    paragraphs = {}
    for e in examples:
        qa = {"id": e.id, "question": e.question, "answers": [{"text": t, "answer_start": s} for t, s in e.answers]}
        paragraphs.setdefault(e.context, []).append(qa | {"is_impossible": not e.answers})
    return {"version": version, "data": [{"paragraphs": [{"context": c, "qas": q} for c, q in paragraphs.items()]}]}


@pytest.fixture(scope="module")
def evaluated(tiny_pretrained, tmp_path_factory):
    """A random tiny QA model's evaluation by the family, as the finetune stage makes it (eval
    batches of 4 sorted by width), on 30 SQuAD v2.0 questions of several windows each, and the
    export the stage would write with the evaluation's record."""
    root = tmp_path_factory.mktemp("qa-inference")
    examples = bbc_qa_examples(seed=1, max_examples=40, unanswerable_fraction=0.3)
    (root / "train.json").write_text(json.dumps(squad(examples[:10])))
    (root / "dev.json").write_text(json.dumps(squad(examples[10:])))
    cfg = FinetuneSection(
        task="question_answering",
        train_path=str(root / "train.json"),
        eval_path=str(root / "dev.json"),
        eval_batch_size=4,
        **LENGTHS,
    )
    task = QUESTION_ANSWERING.encode(cfg, PairTokenizer(tiny_pretrained))
    torch.manual_seed(0)
    # one application of the layer: what is compared is the paths around the model, over many windows
    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE).replace(num_hidden_layers=1)
    model = AlbertForQuestionAnswering(config).eval()
    scores = predict(model, task.eval, 4, 0, scores_of=QUESTION_ANSWERING.scores, collate_fn=QUESTION_ANSWERING.collate)
    evaluation = QUESTION_ANSWERING.evaluate(cfg, task, scores)
    export = root / "best"
    usage = ModelUsage("question_answering", cfg.max_seq_length, evaluation.usage)
    save_model(model, tiny_pretrained, str(export), None, None, usage)
    return {"examples": examples[10:], "task": task, "scores": scores, "evaluation": evaluation, "export": str(export)}


def model_use(folder: str, **settings) -> ModelUse:
    """What the generic side reads from a folder; `settings` replace recorded ones."""
    config = read_model_config(folder, "model")
    recorded = read_usage(config, folder)
    return ModelUse(
        tokenizer=PairTokenizer(folder),
        max_seq_length=applied_length(config, None, "predict.max_seq_length", folder),
        label_names=None,
        settings={**recorded.settings, **settings},
        problem_type=config.get("problem_type"),
    )


def run(folder: str, rows, use: ModelUse, batch_size: int = 3):
    """The generic side's work, batched unlike the evaluation (in row order, 3 windows a batch):
    check, encode, the model over batches (their scores padded to the widest), predictions."""
    assert all(INFERENCE.check_row(row) is None for row in rows)
    encoded = INFERENCE.encode(rows, use)
    assert encoded.owners == sorted(encoded.owners) and len(encoded.features) == len(encoded.extra)
    model = load_hf_pretrained(folder, FAMILIES["question_answering"].model_class).eval()
    parts = []
    with torch.no_grad():
        for i in range(0, len(encoded.features), batch_size):
            batch = QUESTION_ANSWERING.collate(
                encoded.features, range(i, min(i + batch_size, len(encoded.features))), use.tokenizer.pad_id
            )
            parts.append(QUESTION_ANSWERING.scores(model(**batch)).numpy())
    width = max(p.shape[1] for p in parts)
    outputs = np.concatenate([np.pad(p, ((0, 0), (0, width - p.shape[1]), (0, 0))) for p in parts])
    return encoded, INFERENCE.predictions(rows, encoded, outputs, use)


def rows_of(examples):
    return [{"id": e.id, "question": e.question, "context": e.context} for e in examples]


def test_the_family_declares_its_inference():
    assert FAMILIES["question_answering"].load_inference() is INFERENCE
    assert set(INFERENCE.required) <= set(INFERENCE.fields)
    assert list(INFERENCE.output) == ["answer", "start", "score", "null_score"]


def test_answers_equal_the_finetune_evaluation_with_its_chosen_threshold(evaluated):
    rows = rows_of(evaluated["examples"])
    use = model_use(evaluated["export"])
    assert use.settings["null_threshold"] == evaluated["evaluation"].metrics["null_threshold"]
    encoded, predicted = run(evaluated["export"], rows, use)
    assert len(encoded.features) == len(evaluated["task"].eval) > 2 * len(rows)  # several windows a question
    expected = json.loads(evaluated["evaluation"].files["predictions.json"])
    assert {row["id"]: p["answer"] for row, p in zip(rows, predicted)} == expected
    for row, p in zip(rows, predicted):
        assert (p["start"] is None) == (p["answer"] == "")
        assert p["answer"] == "" or row["context"].startswith(p["answer"], p["start"])
    # predict's scores of the answers (the gold texts as the SQuAD file's reader gives them) are the
    # evaluation's reported ones, the HasAns/NoAns splits included
    golds = [[text for text, _ in e.answers] for e in evaluated["examples"]]
    scored = INFERENCE.metrics(golds + ["no list"], predicted + predicted[:1], use, None)
    reported = {k: v for k, v in evaluated["evaluation"].metrics.items() if k not in ("eval_loss", "null_threshold")}
    assert {"HasAns_f1", "NoAns_f1"} <= set(reported)
    assert scored == {"rows": len(rows), "label_not_answers": 1, **reported}


def test_answers_equal_postprocess_at_a_threshold_written_by_hand(evaluated):
    """A threshold between the questions' null odds, so that some are answered and some not: the
    same answers, starts and scores as postprocess on the evaluation's own logits."""
    task = evaluated["task"]
    reference = postprocess(task.reference.contexts, task.reference.windows, *np.moveaxis(evaluated["scores"], -1, 0))
    threshold = float(np.median(list(reference.null_odds.values())))
    rows = rows_of(evaluated["examples"])
    _, predicted = run(evaluated["export"], rows, model_use(evaluated["export"], null_threshold=threshold))
    expected = postprocess(
        task.reference.contexts,
        task.reference.windows,
        *np.moveaxis(evaluated["scores"], -1, 0),
        version_2=True,
        null_threshold=threshold,
    )
    answers = {row["id"]: p["answer"] for row, p in zip(rows, predicted)}
    assert answers == expected.answers and 0 < sum(a == "" for a in answers.values()) < len(answers)
    for row, p in zip(rows, predicted):
        assert p["start"] == expected.starts[row["id"]]
        assert p["score"] == pytest.approx(expected.scores[row["id"]], abs=1e-4)
        assert p["null_score"] == pytest.approx(expected.null_scores[row["id"]], abs=1e-4)
        assert (p["null_score"] - p["score"] > threshold) == (p["answer"] == "")
    # without a threshold (a v1.1 model, or a folder without the record) every question is answered
    _, v1 = run(evaluated["export"], rows, model_use(evaluated["export"], null_threshold=None))
    assert all(p["answer"] for p in v1)


def test_the_recorded_windows_are_the_ones_used(evaluated):
    example = max(evaluated["examples"], key=lambda e: len(e.context))
    row = rows_of([example])
    use = model_use(evaluated["export"])
    assert (use.max_seq_length, use.settings["doc_stride"]) == (64, 24)
    tokenizer = use.tokenizer
    for stride in (24, 40):
        encoded = INFERENCE.encode(row, model_use(evaluated["export"], doc_stride=stride))
        windows = qa_windows(tokenizer, QAExample("0", example.question, example.context), 64, 16, stride)
        assert encoded.features == [(w.input_ids, w.token_type_ids) for w in windows]
        assert encoded.extra == [w.window for w in windows] and encoded.owners == [0] * len(windows)
    short = INFERENCE.encode(row, model_use(evaluated["export"], max_query_length=4))
    assert len(short.features[0][0]) == 64 and short.features[0][0][5] == tokenizer.sep_id  # [CLS] 4 pieces [SEP]


def test_answer_search_settings_defaults_and_errors(tiny_pretrained):
    tokenizer = PairTokenizer(tiny_pretrained)

    def search(length=128, **settings):
        return AnswerSearch.of(ModelUse(tokenizer, length, None, settings, None))

    defaults = FinetuneSection()
    assert search() == AnswerSearch(
        defaults.max_query_length, defaults.doc_stride, defaults.n_best_size, defaults.max_answer_length, None
    )
    assert search(64, max_query_length=64).max_query_length == 60  # a window keeps a context piece
    assert search(null_threshold=-1).null_threshold == -1.0
    for key, value in (("doc_stride", 0), ("n_best_size", "20"), ("max_answer_length", 2.5), ("null_threshold", "x")):
        with pytest.raises(BadInput, match=f"albert_ray.{key} is"):
            search(**{key: value})


def test_every_row_is_answered_or_rejected_with_its_reason(evaluated):
    check = INFERENCE.check_row
    assert check({"question": "Who?", "context": "Ann."}) is None
    assert check({"context": "Ann."}) == "missing_question"
    assert check({"question": "Who?", "context": None}) == "missing_context"
    assert check({"question": 3, "context": "Ann."}) == "not_a_string"
    assert check({"question": "Who?", "context": ["Ann."]}) == "not_a_string"
    assert check({"question": " \n", "context": "Ann."}) == "empty_question"
    assert check({"question": "Who?", "context": ""}) == "empty_context"
    # blank only to the tokenizer: rejected by encode, no window, null outputs; the others answered
    example = evaluated["examples"][0]
    rows = [
        {"question": "\u200b", "context": example.context},
        {"question": example.question, "context": "\u200b\u200b"},
        {"question": example.question, "context": example.context},
    ]
    use = model_use(evaluated["export"])
    encoded = INFERENCE.encode(rows, use)
    assert encoded.rejected == {0: "empty_question", 1: "empty_context"} and set(encoded.owners) == {2}
    outputs = np.zeros((len(encoded.features), 64, 2), np.float32)
    predicted = INFERENCE.predictions(rows, encoded, outputs, use)
    assert predicted[:2] == [dict.fromkeys(INFERENCE.output)] * 2 and isinstance(predicted[2]["answer"], str)
    nothing = INFERENCE.encode(rows[:1], use)
    assert INFERENCE.predictions(rows[:1], nothing, np.zeros((0,)), use) == [dict.fromkeys(INFERENCE.output)]


def test_a_squad_file_becomes_rows_and_predictions_json(tmp_path):
    document = squad([QAExample("a", "Who?", "Ann ran.", (("Ann", 0),)), QAExample("b", "Where?", "Ann ran.")])
    qas = document["data"][0]["paragraphs"][0]["qas"]
    qas += [{"id": 7, "question": "When?"}, {"question": None, "id": ""}, "not an object"]
    data = json.dumps(document).encode()
    rows = INFERENCE.read_file("dev.json", data)
    assert rows == [
        {"id": "a", "question": "Who?", "context": "Ann ran.", "label": ["Ann"]},
        {"id": "b", "question": "Where?", "context": "Ann ran.", "label": []},
        {"id": "7", "question": "When?", "context": "Ann ran."},
        {"id": None, "question": None, "context": "Ann ran."},
        {"id": None, "question": None, "context": "Ann ran."},
    ]
    assert [INFERENCE.check_row(r) for r in rows] == [None, None, None, "missing_question", "missing_question"]
    assert INFERENCE.read_file("s3://b/DEV.JSON.gz", gzip.compress(data)) == rows
    assert INFERENCE.read_file("dev.jsonl", data) is None and INFERENCE.read_file("dev.csv", b"a,b\n") is None

    qas.append({"id": "a", "question": "Again?"})
    with pytest.raises(BadInput, match=r"dev.json data\[0\].paragraphs\[0\].qas\[5\]: id 'a' is already"):
        INFERENCE.read_file("dev.json", json.dumps(document).encode())
    qas.pop()
    document["data"].append({"paragraphs": [{"context": "x", "qas": "none"}]})
    with pytest.raises(BadInput, match=r"dev.json data\[1\].paragraphs\[0\]: .*cannot be listed"):
        INFERENCE.read_file("dev.json", json.dumps(document).encode())
    with pytest.raises(BadInput, match="not a SQuAD file"):
        INFERENCE.read_file("dev.json", b'[{"question": "Who?"}]')

    results = [
        {"id": "a", "answer": "Ann", "start": 0, "score": 2.0, "null_score": 1.0, "rejected": None},
        {"id": "b", "answer": "", "start": None, "score": 0.5, "null_score": 3.0, "rejected": None},
        {"id": "c", "answer": None, "start": None, "score": None, "null_score": None, "rejected": "missing_question"},
    ]
    files = INFERENCE.files(reversed(results))
    assert list(files) == ["predictions.json"] and json.loads(files["predictions.json"]) == {"a": "Ann", "b": ""}


@pytest.mark.slow
def test_predict_on_a_squad_file_writes_the_evaluations_answers_and_scores(evaluated, ray_session, tmp_path):
    """albert-ray predict on the evaluated SQuAD v2.0 file: the answers of predictions.json and
    the parquet are the evaluation's (with the threshold it chose), and the manifest's metrics its
    reported ones (the file's answers read as the gold labels)."""
    from pipelines.config import load_config
    from pipelines.stages.predict import run_predict

    export = Path(evaluated["export"])
    overrides = [f"run_dir={tmp_path}/run", f"predict.model={export}", f"predict.input={export.parent / 'dev.json'}"]
    out = Path(run_predict(load_config(overrides=[*overrides, "predict.workers=1"])))
    manifest = json.loads((out / "manifest.json").read_text())
    n = len(evaluated["examples"])
    assert manifest["rows"] == {"read": n, "predicted": n, "rejected": {}}
    assert manifest["kind"] == "question_answering" and manifest["family_files"] == ["predictions.json"]
    expected = json.loads(evaluated["evaluation"].files["predictions.json"])
    assert json.loads((out / "predictions.json").read_text()) == expected
    table = {r["id"]: r["answer"] for r in pq.read_table(out / "predictions").to_pylist()}
    assert table == expected
    reported = {k: v for k, v in evaluated["evaluation"].metrics.items() if k not in ("eval_loss", "null_threshold")}
    assert manifest["metrics"] == {"rows": n, "label_not_answers": 0, **reported}
