"""The paths a fine-tuned export of each family is applied by, beside predict and serve (which the
test drives through their own entry points): the suite's eval rows of each family as the
fine-tuning read them, its predictions file, onnxruntime on the product's ONNX export (fp32 and
int8) behind the generic Predictor, and plain transformers as that family's users apply a model (issue #44)."""

import csv
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from pipelines.export.onnx import export_onnx, load_exportable, quantize_export
from pipelines.finetuning.families import FAMILIES
from pipelines.inference.predictor import Predictor

from .family_tasks import GLUE, swag_rows

TASKS = {
    "classification": "mnli",
    "regression": "stsb",
    "multi_label": "topics",
    "token_classification": "entities",
    "multiple_choice": "endings",
    "question_answering": "visits",
}
"""Each family's task in the evaluation suite (family_tasks.write_suite)."""
GLUE_FILES = {"classification": ("MNLI/dev_matched.tsv", "gold_label"), "regression": ("STS-B/dev.tsv", "score")}


def eval_rows(family: str, inputs: Path) -> list[dict[str, Any]]:
    """The task's eval rows in the order the fine-tuning predicted them: `id` (as its predictions
    file names them), the family's input fields and the gold `label`."""
    if family in GLUE_FILES:
        name, label = GLUE_FILES[family]
        with open(GLUE / name, newline="") as f:
            table = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        return [
            {"id": str(i), "text": r["sentence1"], "text_pair": r["sentence2"], "label": r[label]}
            for i, r in enumerate(table)
        ]
    if family == "multi_label":
        lines = (inputs / "topics_eval.csv").read_text().splitlines()[1:]
        return [
            {"id": str(i), "text": text, "label": topics.split(";")}
            for i, (text, topics) in enumerate(line.split(",") for line in lines)
        ]
    if family == "multiple_choice":
        return swag_rows(inputs / "swag_val.csv")
    path = inputs / ("dev.conll" if family == "token_classification" else "squad_dev.json")
    rows = FAMILIES[family].load_inference().read_file(str(path), path.read_bytes())
    return [{**row, "id": str(row["id"])} for row in rows]


def predict_input(family: str, inputs: Path, rows: list[dict], scratch: Path) -> tuple[Path, list[str]]:
    """The file `albert-ray predict` reads the eval rows from, and the settings naming its columns:
    the task's own eval file where predict reads it (GLUE's tsv, the csv, CoNLL, SQuAD JSON), the
    multiple-choice questions as jsonl rows (predict reads no SWAG csv)."""
    if family in GLUE_FILES:
        name, label = GLUE_FILES[family]
        columns = ["predict.text_column=sentence1", "predict.text_pair_column=sentence2"]
        return GLUE / name, [*columns, f"predict.label_column={label}"]
    if family == "multi_label":
        return inputs / "topics_eval.csv", ["predict.label_column=topics", "predict.label_delimiter=;"]
    if family == "multiple_choice":
        path = scratch / "questions.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return path, ["predict.id_column=id", "predict.label_column=label"]
    return inputs / ("dev.conll" if family == "token_classification" else "squad_dev.json"), []


def finetune_predictions(family: str, task: Path) -> dict[str, Any]:
    """The finetune stage's prediction of each eval row by id: its predictions.jsonl's, the tags of
    predictions.conll (word gold predicted), predictions.json's answers."""
    if family == "token_classification":
        blocks = [block.splitlines() for block in (task / "predictions.conll").read_text().split("\n\n") if block]
        return {str(i): [line.split()[2] for line in block] for i, block in enumerate(blocks)}
    if family == "question_answering":
        return json.loads((task / "predictions.json").read_text())
    lines = (task / "predictions.jsonl").read_text().splitlines()
    return {str(p["id"]): p["prediction"] for p in map(json.loads, lines)}


def call(url: str, body: dict | None = None) -> tuple[int, Any]:
    """(status, JSON answer) of a POST of `body`, or of a GET."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def served_predictions(url: str, fields: tuple[str, ...], rows: list[dict]) -> list[dict]:
    """serve's answers to one list request of the rows' fields."""
    status, answers = call(url, {"inputs": [{f: row[f] for f in fields if f in row} for row in rows]})
    assert status == 200, answers
    return answers


def onnx_predictions(folder: Path, rows: list[dict], scratch: Path) -> dict[str, list[dict]]:
    """The export written by the product's exporter, fp32 and its int8 copy, each run by onnxruntime
    behind the generic Predictor (predict.backend=onnx): the family encodes, collates, scores and
    predicts as predict's replicas do. By precision."""
    files = {"fp32": scratch / "model.onnx", "int8": scratch / "model.int8.onnx"}
    export_onnx(load_exportable(folder), files["fp32"])
    quantize_export(files["fp32"], files["int8"])
    return {name: Predictor.load(str(folder), onnx=str(path)).predict(rows) for name, path in files.items()}


CUT = {"tags": "cut"}
"""Plain transformers' tags of a sentence its tokenizer cuts words off."""
HEADS = {
    "classification": "AutoModelForSequenceClassification",
    "regression": "AutoModelForSequenceClassification",
    "multi_label": "AutoModelForSequenceClassification",
    "token_classification": "AutoModelForTokenClassification",
    "multiple_choice": "AutoModelForMultipleChoice",
}


@torch.no_grad()
def transformers_predictions(family: str, folder: Path, rows: list[dict]) -> list[dict]:
    """AutoTokenizer and AutoModelFor<the family's head> from the folder with no extra argument, the
    tokenizer called with no length or segment setting (the folder records both), the outputs read
    as the family's users read them: softmax, sigmoid above 0.5 or the number, with id2label; the
    tags of words' first pieces (word_ids); the softmax over a question's choices; QA by
    bench/qa_predict_speed.py's plain transformers loop (utils_qa's answer search). A sentence the
    tokenizer cuts (longer than the recorded length, which the family windows) is CUT."""
    if family == "question_answering":
        from bench.qa_predict_speed import load_transformers

        answers, _ = load_transformers(str(folder), 16, "longest")(rows)
        return [{"answer": answers[row["id"]]} for row in rows]
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = getattr(transformers, HEADS[family]).from_pretrained(folder).eval()
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if family == "token_classification":
        return [word_tags(tokenizer, model, labels, row["tokens"]) for row in rows]
    if family == "multiple_choice":
        return [choice(tokenizer, model, row) for row in rows]
    pairs = [row["text_pair"] for row in rows] if "text_pair" in rows[0] else None
    batch = tokenizer([row["text"] for row in rows], pairs, truncation=True, padding=True, return_tensors="pt")
    assert "token_type_ids" in batch  # the export's tokenizer_config asks for them (transformers#48128)
    logits = model(**batch).logits.double()
    if family == "regression":
        return [{"prediction": float(value), "probabilities": None} for value in logits[:, 0]]
    if family == "multi_label":
        sigmoid = torch.sigmoid(logits)
        return [{"prediction": [labels[j] for j in np.flatnonzero(p > 0.5)], "probabilities": p} for p in sigmoid]
    softmax = torch.softmax(logits, -1)
    return [{"prediction": labels[int(p.argmax())], "probabilities": p} for p in softmax]


def word_tags(tokenizer, model, labels: list[str], words: list[str]) -> dict:
    """The tag of each word's first piece; CUT where the sentence is longer than the tokenizer's
    length (truncated, its last words would be cut or tagged on a shorter context than the family's)."""
    encoded = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    if encoded["input_ids"].shape[1] > tokenizer.model_max_length:
        return CUT
    assert "token_type_ids" in encoded
    logits = model(**encoded).logits[0]
    first: dict[int, int] = {}
    for position, word in enumerate(encoded.word_ids(0)):
        if word is not None:
            first.setdefault(word, position)
    return {"tags": [labels[int(logits[first[w]].argmax())] for w in range(len(words))]}


def choice(tokenizer, model, row: dict) -> dict:
    """run_swag's pairs: the context, then the question and a choice."""
    second = [f"{row['question'].strip()} {c.strip()}" for c in row["choices"]]
    encoded = tokenizer(
        [row["context"].strip()] * len(second), second, truncation=True, padding=True, return_tensors="pt"
    )
    assert "token_type_ids" in encoded
    logits = model(**{k: v[None] for k, v in encoded.items()}).logits[0].double()
    return {"prediction": int(logits.argmax()), "probabilities": torch.softmax(logits, -1)}
