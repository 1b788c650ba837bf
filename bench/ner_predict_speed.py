"""Token classification predict: the family's inference (what predict's and serve's replicas run
for a token-classification export: INFERENCE.encode, the model over batches sorted by length,
INFERENCE.predictions) against transformers' `pipeline("token-classification",
aggregation_strategy="first")`, on the same model and rows, side by side in one process.

The model is a random-weight token-classification export of the given preset with CoNLL-2003's nine
tags, written as fine-tuning writes it (save_model: its tokenizer cuts at `--seq`, its record says
IOB2 and first pieces); `--model` takes a real one. The rows are seeded synthetic sentences of 5-40
words joined by spaces, each short enough that neither side windows or truncates it. Their words are
those whose first piece is more than SentencePiece's bare word mark `▁`: the pipeline finds a
SentencePiece word's pieces by a fallback heuristic (it warns so) that takes a bare `▁` and the
piece after it for two words, so such words would be grouped differently by design, not by the
model. Ours gets the raw text (split_words gives the same words), the pipeline the same text.

Both run on `--threads` torch threads, after a warm-up. Agreement: the share of entities, as (type,
first character, end character), that both find (found by both over found by either), and of rows
whose entities are all equal.

    python bench/ner_predict_speed.py                       # tiny model, 5,000 rows, 1 thread
    python bench/ner_predict_speed.py --preset base --rows 500
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from albert_model import AlbertConfig
from albert_model.heads import AlbertForTokenClassification
from albert_model.hf import load_hf_pretrained

LABELS = ["B-LOC", "B-MISC", "B-ORG", "B-PER", "I-LOC", "I-MISC", "I-ORG", "I-PER", "O"]
WORDS = (  # the sentences' vocabulary
    "the market shares rose after minister said that match was won by team in final minutes while film and "
    "new phone were shown to public at show john mary london paris new york bank of england united nations "
    "world cup prime government company chief executive league season players club election party"
)


def model_use(folder: str):
    """What predict reads from a token-classification folder for its family (ModelUse)."""
    from pipelines.finetuning.inference import ModelUse
    from pipelines.finetuning.tokenizer import PairTokenizer
    from pipelines.storage.models import applied_length, read_model_config, read_usage

    config = read_model_config(folder, "model")
    usage = read_usage(config, folder)
    names = [config["id2label"][k] for k in sorted(config["id2label"], key=int)]
    length = applied_length(config, None, "--seq", folder)
    return ModelUse(PairTokenizer(folder), length, names, usage.settings if usage else {}, None)


def make_model(folder: Path, preset: str, spiece: str, seq: int) -> str:
    from pipelines.storage.models import ModelUsage, save_model

    pretrained = folder.parent / "pretrained"
    pretrained.mkdir(parents=True, exist_ok=True)
    (pretrained / "spiece.model").write_bytes(Path(spiece).read_bytes())
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(preset, vocab_size=1000).replace(num_labels=len(LABELS))
    usage = ModelUsage("token_classification", seq, {"tag_scheme": "IOB2", "word_start": "first_piece"})
    save_model(AlbertForTokenClassification(config).eval(), str(pretrained), str(folder), LABELS, None, usage)
    return str(folder)


def sentences(n: int, use, seed: int = 0) -> list[str]:
    """`n` texts of 5-40 words whose first piece is not a bare `▁`, each fitting in one window."""
    sp = use.tokenizer.sp
    bare = sp.piece_to_id("▁")
    words = [w for w in dict.fromkeys(WORDS.split()) if use.tokenizer.pieces(w)[0] != bare]
    rng = np.random.default_rng(seed)
    texts = []
    while len(texts) < n:
        text = " ".join(rng.choice(words, size=int(rng.integers(5, 41))))
        if len(use.tokenizer.pieces(text)) <= use.max_seq_length - 2:
            texts.append(text)
    return texts


def run_ours(folder: str, texts: list[str], batch: int) -> tuple[float, list[set]]:
    from pipelines.finetuning.families import FAMILIES
    from pipelines.finetuning.loop import predict

    family = FAMILIES["token_classification"]
    inference, training = family.load_inference(), family.load_training()
    use = model_use(folder)
    model = load_hf_pretrained(folder, AlbertForTokenClassification).eval()

    def apply(rows: list[dict]) -> list[dict]:
        encoded = inference.encode(rows, use)
        outputs = predict(
            model, encoded.features, batch, use.tokenizer.pad_id, scores_of=training.scores, collate_fn=training.collate
        )
        return inference.predictions(rows, encoded, outputs, use)

    rows = [{"text": t} for t in texts]
    apply(rows[: batch * 2])  # warm-up
    started = time.perf_counter()
    out = apply(rows)
    seconds = time.perf_counter() - started
    assert all(len(p["words"]) == len(t.split()) for p, t in zip(out, texts))  # the same words as the pipeline's
    return seconds, [{(e["type"], e["start"], e["end"]) for e in p["entities"]} for p in out]


def run_transformers(folder: str, texts: list[str], batch: int) -> tuple[float, list[set]]:
    import transformers

    pipe = transformers.pipeline("token-classification", model=folder, aggregation_strategy="first", device=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Tokenizer does not support real words, using fallback heuristic", per row
        pipe(texts[: batch * 2], batch_size=batch)
        started = time.perf_counter()
        out = pipe(texts, batch_size=batch)
        seconds = time.perf_counter() - started
    return seconds, [{(e["entity_group"], e["start"], e["end"]) for e in row} for row in out]


def compare(folder: str, texts: list[str], batch: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    ours_s, ours = run_ours(folder, texts, batch)
    theirs_s, theirs = run_transformers(folder, texts, batch)
    both = sum(len(a & b) for a, b in zip(ours, theirs))
    either = sum(len(a | b) for a, b in zip(ours, theirs))
    return {
        "rows": len(texts),
        "words": sum(len(t.split()) for t in texts),
        "batch_size": batch,
        "threads": threads,
        "ours_rows_per_s": len(texts) / ours_s,
        "transformers_rows_per_s": len(texts) / theirs_s,
        "speedup": theirs_s / ours_s,
        "entities": either,
        "entities_equal": both / either if either else 1.0,
        "rows_equal": float(np.mean([a == b for a, b in zip(ours, theirs)])),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--model", help="a token-classification export to use instead of a random one")
    parser.add_argument("--spiece", help="its SentencePiece model (default: one trained on the embedded corpus)")
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--seq", type=int, default=128, help="the random model's max_seq_length")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        if args.model:
            model = args.model
        else:
            from predict_throughput import default_spiece

            model = make_model(root / "model", args.preset, args.spiece or default_spiece(root), args.seq)
        texts = sentences(args.rows, model_use(model))
        result = {"preset": None if args.model else args.preset, **compare(model, texts, args.batch_size, args.threads)}
    print("| contender | rows/s |\n|---|---:|")
    print(f"| ours (the family's inference) | {result['ours_rows_per_s']:.0f} |")
    print(f"| transformers' pipeline | {result['transformers_rows_per_s']:.0f} |")
    print(f"speedup {result['speedup']:.2f}x; entities equal {result['entities_equal']:.4f} of {result['entities']}")
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
