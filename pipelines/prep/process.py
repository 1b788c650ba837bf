"""Documents to examples: segment, normalise, tokenize, pair (or not), mask; count everything; build shards.

Pure (no Ray): the data stage's Ray Data UDF holds one DocumentProcessor and delegates here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import sentencepiece as spm

from ..config import DataSection
from ..errors import BadInput
from .corpus import TOO_SHORT, Document, InputFile, Rejected, read_documents
from .examples import PairingSpec, document_examples, document_rng, is_validation_document, split_long_segments
from .masking import MaskingSpec, word_start_table
from .negatives import NegativePools, pool_window, window_tokens
from .text import normalize_text, split_sentences

SPLITS = ("train", "validation")
MAX_REJECTION_DETAILS = 50  # examples of rejections kept in the manifest, per reason


def example_schema(dynamic: bool, labelled: bool = True) -> pa.Schema:
    """The parquet schema of the examples (documented in docs/data.md); `labelled`: a sentence
    objective's label column (sop and nsp; none has no label)."""
    fields = [
        pa.field("example_id", pa.string()),
        pa.field("input_ids", pa.list_(pa.int32())),
        pa.field("token_type_ids", pa.list_(pa.int8())),
        pa.field("masked_lm_positions", pa.list_(pa.int32())),
        pa.field("masked_lm_ids", pa.list_(pa.int32())),
    ]
    if labelled:
        fields.append(pa.field("sentence_order_label", pa.int8()))
    if dynamic:
        fields.append(pa.field("word_starts", pa.list_(pa.bool_())))
    return pa.schema(fields)


@dataclass
class PrepStats:
    """Counters of one worker's share of the corpus; merged by the driver into the manifest."""

    documents_used: int = 0
    documents_rejected: Counter = field(default_factory=Counter)
    rejection_examples: dict = field(default_factory=dict)  # reason -> first few "where: why"
    documents_with_replaced_bytes: int = 0
    text_bytes: int = 0
    examples: Counter = field(default_factory=Counter)  # per split
    tokens: Counter = field(default_factory=Counter)  # per split
    short_examples: int = 0
    sentence_order_labels: Counter = field(default_factory=Counter)
    masked_tokens: int = 0
    maskable_tokens: int = 0  # tokens of the masked examples, for the masked share
    replacements: Counter = field(default_factory=Counter)  # mask / keep / random
    ngram_lengths: Counter = field(default_factory=Counter)

    @property
    def documents_read(self) -> int:
        return self.documents_used + sum(self.documents_rejected.values())

    def reject(self, rejected: Rejected) -> None:
        self.documents_rejected[rejected.reason] += 1
        details = self.rejection_examples.setdefault(rejected.reason, [])
        if len(details) < MAX_REJECTION_DETAILS:
            details.append(rejected.detail)

    def reject_unlisted(self, files: list[InputFile]) -> list[InputFile]:
        """Count the inputs the listing rejected (never opened); the others, for the workers."""
        for f in files:
            if f.rejected:
                self.reject(next(read_documents(f)))
        return [f for f in files if not f.rejected]

    def require_used(self) -> None:
        """A corpus of which no document can be used is an error, not an empty dataset."""
        if self.documents_used:
            return
        if not self.documents_read:
            raise BadInput("corpus.paths: the inputs hold no documents")
        counts = sorted(self.documents_rejected.items(), key=lambda kv: (-kv[1], kv[0]))
        first = self.rejection_examples[counts[0][0]][0]
        reasons = ", ".join(f"{reason}: {n}" for reason, n in counts)
        raise BadInput(f"corpus.paths: all {self.documents_read} documents were rejected ({reasons}); e.g. {first}")

    def merge(self, other: PrepStats) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            if name == "rejection_examples":
                for reason, details in value.items():
                    mine.setdefault(reason, []).extend(details)
                    del mine[reason][MAX_REJECTION_DETAILS:]
            elif isinstance(mine, Counter):
                mine.update(value)
            else:
                setattr(self, name, mine + value)

    def to_dict(self) -> dict:
        return {k: dict(v) if isinstance(v, Counter) else v for k, v in vars(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> PrepStats:
        stats = cls()
        for k, v in d.items():
            setattr(stats, k, Counter(v) if isinstance(getattr(stats, k), Counter) else v)
        return stats


class ShardBuffer:
    """Examples of one split, collected column-wise until written as one parquet table."""

    def __init__(self, dynamic: bool, labelled: bool = True):
        self.dynamic, self.labelled = dynamic, labelled
        self.clear()

    def clear(self) -> None:
        self.ids: list[str] = []
        self.columns: dict[str, list[np.ndarray]] = {
            "input_ids": [],
            "token_type_ids": [],
            "masked_lm_positions": [],
            "masked_lm_ids": [],
            "word_starts": [],
        }
        self.labels: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def to_table(self) -> pa.Table:
        schema = example_schema(self.dynamic, self.labelled)
        arrays = [pa.array(self.ids, pa.string())]
        for name in ("input_ids", "token_type_ids", "masked_lm_positions", "masked_lm_ids"):
            arrays.append(_list_array(self.columns[name], schema.field(name).type))
        if self.labelled:
            arrays.append(pa.array(self.labels, pa.int8()))
        if self.dynamic:
            arrays.append(_list_array(self.columns["word_starts"], schema.field("word_starts").type))
        return pa.Table.from_arrays(arrays, schema=schema)


def _list_array(parts: list[np.ndarray], list_type: pa.ListType) -> pa.Array:
    value_type = list_type.value_type.to_pandas_dtype()
    lengths = np.fromiter((len(p) for p in parts), dtype=np.int32, count=len(parts))
    offsets = np.zeros(len(parts) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = np.concatenate(parts).astype(value_type) if parts else np.zeros(0, value_type)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, list_type.value_type))


class DocumentProcessor:
    """Holds the tokenizer and the specs; turns documents into rows of the two shard buffers.
    `pools`: the negatives of data.sentence_objective=nsp (None otherwise)."""

    def __init__(self, spiece_model: bytes, cfg: DataSection, lowercase: bool, pools: NegativePools | None = None):
        self.cfg, self.lowercase, self.pools = cfg, lowercase, pools
        self.sp = spm.SentencePieceProcessor(model_proto=spiece_model)
        pieces = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        self.word_starts = word_start_table(pieces)
        self.pairing = PairingSpec(cfg.max_seq_length, cfg.short_seq_prob, cfg.sentence_objective)
        self.masking = MaskingSpec(cfg.masked_lm_prob, cfg.max_predictions_per_seq, cfg.ngram, len(pieces))
        self.static = cfg.masking == "static"

    def split_of(self, doc: Document) -> str:
        return "validation" if is_validation_document(self.cfg.seed, doc.key, self.cfg.validation_fraction) else "train"

    def pool_window(self, doc: Document) -> list[np.ndarray]:
        """What an NSP pool keeps of a document: a seeded window of its segments (empty: none)."""
        return pool_window(self.segments(doc), self.cfg.seed, doc.key, window_tokens(self.cfg.max_seq_length))

    def segments(self, doc: Document) -> list[np.ndarray]:
        """Token ids of the document's sentences (empty ones dropped), long ones cut to fit a pair."""
        sentences = doc.lines if doc.lines is not None else split_sentences(doc.text)
        normalized = [normalize_text(s, self.lowercase) for s in sentences]
        ids = [np.asarray(ids, dtype=np.int32) for ids in self.sp.encode(normalized) if ids]
        return split_long_segments(ids, self.pairing.max_segment_tokens)

    def process(self, doc: Document, buffers: dict[str, ShardBuffer], stats: PrepStats) -> None:
        text_len = len(doc.text.encode()) if doc.text is not None else sum(len(s.encode()) + 1 for s in doc.lines)
        segments = self.segments(doc)
        pairs = self.cfg.sentence_objective != "none"
        if len(segments) < (2 if pairs else 1):
            tokens = sum(len(s) for s in segments)
            why = f"{tokens} tokens in one sentence; a sentence pair needs two" if pairs else "no tokens"
            stats.reject(Rejected(doc.key, TOO_SHORT, f"{doc.key}: {why}"))
            return
        stats.documents_used += 1
        stats.documents_with_replaced_bytes += doc.replaced_bytes
        stats.text_bytes += text_len
        split = self.split_of(doc)
        buffer = buffers[split]
        pool = self.pools.for_document(split, doc.key) if self.pools is not None else None
        for dupe in range(self.cfg.dupe_factor):
            rng = document_rng(self.cfg.seed, doc.key, dupe)
            examples = document_examples(
                segments, self.pairing, self.masking, self.word_starts, rng, self.static, pool, doc.key
            )
            for i, ex in enumerate(examples):
                buffer.ids.append(f"{doc.key}/{dupe}/{i}")
                buffer.columns["input_ids"].append(ex.input_ids)
                buffer.columns["token_type_ids"].append(ex.token_type_ids)
                stats.examples[split] += 1
                stats.tokens[split] += len(ex.input_ids)
                stats.short_examples += ex.is_short
                if ex.sentence_order_label is not None:
                    buffer.labels.append(ex.sentence_order_label)
                    stats.sentence_order_labels[str(ex.sentence_order_label)] += 1
                if ex.masked is not None:
                    buffer.columns["masked_lm_positions"].append(ex.masked.positions)
                    buffer.columns["masked_lm_ids"].append(ex.masked.labels)
                    stats.masked_tokens += len(ex.masked.positions)
                    stats.maskable_tokens += len(ex.input_ids)
                    stats.replacements.update(
                        dict(zip(("mask", "keep", "random"), np.bincount(ex.masked.replacement, minlength=3).tolist()))
                    )
                    stats.ngram_lengths.update(
                        {str(n): c for n, c in Counter(ex.masked.ngram_lengths.tolist()).items()}
                    )
                else:
                    empty = np.zeros(0, dtype=np.int32)
                    buffer.columns["masked_lm_positions"].append(empty)
                    buffer.columns["masked_lm_ids"].append(empty)
                    buffer.columns["word_starts"].append(ex.word_starts)


__all__ = ["DocumentProcessor", "PrepStats", "ShardBuffer", "example_schema", "SPLITS"]
