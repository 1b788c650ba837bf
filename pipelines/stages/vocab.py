"""`albert-ray vocab`: a SentencePiece vocabulary from a bounded, seeded sample of the corpus.

Ray Data workers read, segment and normalise the documents and keep, per work unit, the sentences
with the smallest seeded hashes; the driver merges these into the overall smallest
`vocab.input_sentence_size`. Memory is bounded by the sample size, not the corpus, and the sample
is the same whatever the number of workers.
"""

from __future__ import annotations

import hashlib
import heapq
import io
import json
import logging

import numpy as np
import sentencepiece as spm

from ..config import config_to_dict
from ..errors import ConfigError, UserError, error_record, raise_error_record
from ..prep.corpus import Rejected, list_inputs, read_documents
from ..prep.examples import stable_hash
from ..prep.process import PrepStats
from ..prep.text import normalize_text, split_sentences
from ..rundir.lifecycle import StageRun, stage_runner
from ..storage import read_bytes, write_bytes, write_text
from .ray_runtime import init_ray, map_units, resolve_num_workers, unit_files

log = logging.getLogger(__name__)

CONTROL_SYMBOLS = ["[CLS]", "[SEP]", "[MASK]"]


class SampleSentencesFn:
    """Ray Data UDF: the `k` sentences of one work unit with the smallest seeded hashes."""

    def __init__(self, k: int, seed: int, lowercase: bool, text_field: str):
        self.k, self.seed, self.lowercase, self.text_field = k, seed, lowercase, text_field

    def __call__(self, batch):
        try:
            return self.sample(batch)
        except UserError as e:  # e.g. a parquet file without the text column: its one line, on the driver
            return {"record": np.array([json.dumps(error_record(e))], dtype=object)}

    def sample(self, batch):
        _, files = unit_files(batch)
        heap: list[tuple[int, str]] = []  # max-heap by negated hash of the k smallest so far
        stats, sentences = PrepStats(), 0
        for f in files:
            for doc in read_documents(f, self.text_field):
                if isinstance(doc, Rejected):
                    stats.reject(doc)
                    continue
                stats.documents_used += 1
                for i, sentence in enumerate(doc.lines if doc.lines is not None else split_sentences(doc.text)):
                    sentences += 1
                    h = stable_hash(self.seed, doc.key, i)
                    if len(heap) < self.k:
                        heapq.heappush(heap, (-h, sentence))
                    elif -heap[0][0] > h:
                        heapq.heapreplace(heap, (-h, sentence))
        records = [{"hash": -neg, "sentence": normalize_text(s, self.lowercase)} for neg, s in heap]
        records.append({"stats": stats.to_dict(), "sentences": sentences})
        return {"record": np.array([json.dumps(r) for r in records], dtype=object)}


def train_sentencepiece(sentences: list[str], vocab_size: int, user_defined_symbols: list[str]) -> bytes:
    """ALBERT's SentencePiece settings (ids: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4).

    User-defined symbols are off by default: transformers 5 builds AlbertTokenizer through the
    `tokenizers` library, which splits the text at such symbols and prefixes the next piece with
    a word marker, so 43% of corpus sentences got other ids than SentencePiece gives (0% without).
    """
    model = io.BytesIO()
    extra = {"user_defined_symbols": user_defined_symbols} if user_defined_symbols else {}
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            model_type="unigram",
            vocab_size=vocab_size,
            pad_id=0,
            unk_id=1,
            bos_id=-1,
            eos_id=-1,
            control_symbols=CONTROL_SYMBOLS,
            input_sentence_size=len(sentences),
            shuffle_input_sentence=True,
            character_coverage=0.99995,
            num_threads=2,
            minloglevel=2,
            **extra,
        )
    except RuntimeError as e:
        raise ConfigError(
            f"vocab.size={vocab_size}: SentencePiece could not train on {len(sentences)} sentences: {e}"
        ) from e
    return model.getvalue()


def build_vocab(run: StageRun) -> dict:
    """spiece.model and spiece.vocab in the stage's folder; returns the manifest's fields."""
    config = run.config
    if config.vocab.model:
        model = read_bytes(config.vocab.model)
        sample_info = {"reused": config.vocab.model}
    else:
        files = list_inputs(config.corpus.paths, config.corpus.format)
        stats = PrepStats()
        usable = stats.reject_unlisted(files)
        if not usable:
            stats.require_used()
        init_ray()
        workers = resolve_num_workers(config.data.num_workers)
        k = config.vocab.input_sentence_size
        fn_kwargs = dict(
            k=k, seed=config.data.seed, lowercase=config.vocab.lowercase, text_field=config.corpus.text_field
        )
        best: list[tuple[int, str]] = []
        sentences = 0
        for record in map_units(usable, workers, SampleSentencesFn, fn_kwargs):
            raise_error_record(record)
            if "hash" in record:
                best.append((record["hash"], record["sentence"]))
                if len(best) >= 2 * k:
                    best = heapq.nsmallest(k, best)
            else:
                stats.merge(PrepStats.from_dict(record["stats"]))
                sentences += record["sentences"]
        stats.require_used()
        sample = [s for _, s in sorted(heapq.nsmallest(k, best))]
        log.info("training SentencePiece on %d of %d sentences", len(sample), sentences)
        model = train_sentencepiece(sample, config.vocab.size, config.vocab.user_defined_symbols)
        sample_info = {
            "documents": stats.documents_used,
            "rejected": dict(stats.documents_rejected),
            "rejection_examples": stats.rejection_examples,
            "sentences": sentences,
            "sampled_sentences": len(sample),
            "input_files": len(files),
        }
    sp = spm.SentencePieceProcessor(model_proto=model)
    pieces = "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i)}\n" for i in range(sp.get_piece_size()))
    write_bytes(run.path("spiece.model"), model)
    write_text(run.path("spiece.vocab"), pieces)
    log.info("vocabulary of %d pieces", sp.get_piece_size())
    return {
        "vocab_size": sp.get_piece_size(),
        "sha256": hashlib.sha256(model).hexdigest(),
        "special_ids": {p: sp.piece_to_id(p) for p in ["<pad>", "<unk>", *CONTROL_SYMBOLS]},
        "sample": sample_info,
        "config": config_to_dict(config.vocab),
    }


run_vocab = stage_runner("vocab")
