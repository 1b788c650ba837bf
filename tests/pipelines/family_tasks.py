"""Small learnable tasks of four fine-tuning families, written in their real formats, and one
evaluation suite (finetune.tasks) that searches them and two GLUE tasks in one `albert-ray run`, a
task of each of the six families: the families' stage tests read their task's folder of that run
instead of each running a search of its own."""

import csv
import json
from pathlib import Path

import numpy as np
import yaml

# multi-label: texts holding the words of one or two topics; the topics are the labels
WORDS = {"sport": "goal match", "politics": "vote minister", "business": "market shares"}
# token classification: `<person> visited <place> today`, tagged B-PER, O, B-LOC (I-LOC), O
PEOPLE = ["john", "mary", "ahmed", "li", "sofia"]
PLACES = [["paris"], ["london"], ["new", "york"], ["rome"]]
# multiple choice: `The <animal>` -> four endings, the right one its sound
ANIMALS = {"dog": "barks", "cat": "meows", "cow": "moos", "duck": "quacks"}
# question answering: `who visited <city> today?` over visits and news; unanswerable where the city
# is not visited. Every word's first piece is more than SentencePiece's bare `▁`, whose character
# span transformers' tokenizer reads otherwise (bench/qa_predict_speed.py)
CITIES = ["london", "paris", "rome", "berlin"]
NEWS = ["the minister said the vote would take place next week.", "market shares rose as the bank reported profits."]


def topics(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        chosen = sorted(rng.choice(sorted(WORDS), size=1 + i % 2, replace=False).tolist())
        words = " ".join(rng.choice(WORDS[t].split()) for t in chosen)
        rows.append({"text": f"{words} today {i}", "topics": chosen})
    return rows


def conll(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        place = PLACES[rng.integers(len(PLACES))]
        words = [(PEOPLE[rng.integers(len(PEOPLE))], "B-PER"), ("visited", "O")]
        words += [(w, "B-LOC" if i == 0 else "I-LOC") for i, w in enumerate(place)] + [("today", "O")]
        lines += [f"{w} X X {t}\n" for w, t in words] + ["\n"]
    return "".join(lines)


def swag(n: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    rows = ["video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"]
    for i in range(n):
        animal = sorted(ANIMALS)[rng.integers(len(ANIMALS))]
        endings = [ANIMALS[a] + " loudly." for a in sorted(ANIMALS)]
        order = rng.permutation(4)
        shuffled = [endings[j] for j in order]
        label = int(np.where(order == sorted(ANIMALS).index(animal))[0][0])
        rows.append(f"v{i},{i},x,It is morning on the farm.,The {animal},gold,{','.join(shuffled)},{label}\n")
    return "".join(rows)


def squad(n: int, seed: int) -> dict:
    """A SQuAD v2.0 file of `n` questions, each on a context of its own of ~60 pieces: two windows
    of the suite's 64 tokens."""
    rng = np.random.default_rng(seed)
    paragraphs = []
    for i in range(n):
        people, cities = rng.permutation(PEOPLE)[:3].tolist(), rng.permutation(CITIES).tolist()
        visits = [f"{person} visited {city} today." for person, city in zip(people, cities)]
        context = " ".join([visits[0], NEWS[i % 2], *visits[1:], NEWS[1 - i % 2]])
        asked = cities[i % 4]  # the fourth city is visited by no one
        answers = []
        if asked in cities[:3]:
            person = people[cities.index(asked)]
            answers = [{"text": person, "answer_start": context.index(f"{person} visited {asked}")}]
        question = f"who visited {asked} today?"
        qa = {"id": f"q{i}", "question": question, "answers": answers, "is_impossible": not answers}
        paragraphs.append({"context": context, "qas": [qa]})
    return {"version": "v2.0", "data": [{"title": "visits", "paragraphs": paragraphs}]}


def swag_rows(path: Path) -> list[dict]:
    """A SWAG file's questions as predict's and serve's multiple-choice rows, with their id (as the
    fine-tuning's predictions.jsonl names them) and gold label."""
    with open(path, newline="") as f:
        return [
            {
                "id": r["fold-ind"],
                "context": r["sent1"],
                "question": r["sent2"],
                "choices": [r[f"ending{i}"] for i in range(4)],
                "label": r["label"],
            }
            for r in csv.DictReader(f)
        ]


GLUE = Path(__file__).parent.parent / "data" / "glue"
"""A few rows of each GLUE task in GLUE's own files and layout."""


def write_suite(folder: Path, pretrained: str, run_dir: str) -> Path:
    """The four tasks' files (the first three each with a row its reader rejects) and a config naming
    them, and GLUE's MNLI and STS-B by name, as an evaluation suite: the multi-label task also scored on a further file
    (finetune.extra_eval_paths, as MNLI's mismatched set), the token-classification one with a
    repeat of its best configuration (tune.repeats), the multiple-choice one with the
    no-pretraining arm (finetune.compare_random). Returns the config file."""
    folder.mkdir(parents=True, exist_ok=True)
    train = topics(80, 0) + [{"text": "", "topics": ["sport"]}, {"text": "no topics key"}]
    (folder / "topics_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    held = topics(20, 1)  # the eval table as text cells: topics split at ";"
    for name, rows in (("topics_eval.csv", held), ("topics_more.csv", topics(10, 2))):
        (folder / name).write_text("text,topics\n" + "".join(f"{r['text']},{';'.join(r['topics'])}\n" for r in rows))
    (folder / "train.conll").write_text("-DOCSTART- -X- -X- O\n\n" + conll(60, 0) + "bad line\n\n")
    (folder / "dev.conll").write_text(conll(15, 1))
    (folder / "swag_train.csv").write_text(swag(40, 0) + "bad,0,x,ctx,The cat,gold,a,b,c,d,7\n")
    (folder / "swag_val.csv").write_text(swag(12, 1))
    (folder / "squad_train.json").write_text(json.dumps(squad(60, 0)))
    (folder / "squad_dev.json").write_text(json.dumps(squad(12, 1)))

    def space(batch_size: int, epochs: int) -> dict:
        return {"space": {"finetune.lr": 0.001, "finetune.batch_size": batch_size, "finetune.epochs": epochs}}

    config = {
        "run_dir": run_dir,
        "finetune": {
            "pretrained": pretrained,
            "tasks": {
                "topics": {
                    "finetune": {
                        "task": "multi_label",
                        "train_path": str(folder / "topics_train.jsonl"),
                        "eval_path": str(folder / "topics_eval.csv"),
                        "label_column": "topics",
                        "label_delimiter": ";",
                        "max_seq_length": 16,
                        "extra_eval_paths": {"more": str(folder / "topics_more.csv")},
                    },
                    "tune": space(16, 2),
                },
                "entities": {
                    "finetune": {
                        "task": "token_classification",
                        "train_path": str(folder / "train.conll"),
                        "eval_path": str(folder / "dev.conll"),
                        "max_seq_length": 16,
                    },
                    "tune": {**space(16, 2), "repeats": 1},
                },
                "endings": {
                    "finetune": {
                        "task": "multiple_choice",
                        "train_path": str(folder / "swag_train.csv"),
                        "eval_path": str(folder / "swag_val.csv"),
                        "max_seq_length": 24,
                        "compare_random": True,
                    },
                    "tune": space(8, 1),
                },
                # GLUE's files, by name
                "mnli": {"finetune": {"max_seq_length": 32}, "tune": space(4, 1)},
                "stsb": {"finetune": {"max_seq_length": 32}, "tune": space(4, 1)},
                "visits": {
                    "finetune": {
                        "task": "question_answering",
                        "train_path": str(folder / "squad_train.json"),
                        "eval_path": str(folder / "squad_dev.json"),
                        "max_seq_length": 64,
                        "max_query_length": 16,
                        "doc_stride": 24,
                    },
                    "tune": space(16, 2),
                },
            },
            "glue_dir": str(GLUE),
        },
        "tune": {"num_samples": 1, "scheduler": "none"},
    }
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
