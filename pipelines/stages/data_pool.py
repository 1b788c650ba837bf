"""NSP's pools of negative documents (pipelines/prep/negatives.py), gathered through Ray Data in two
passes over the data stage's work units.

The first pass finds, per split, the keys of the data.nsp_pool_documents documents with the smallest
pool hashes: each unit sends its own smallest keys, and the driver keeps the overall smallest (a
bottom-k sample, as the vocabulary's: the same documents whatever the workers or units). Nothing is
tokenized there. The second pass tokenizes only those documents into their windows. The driver thus
receives keys and the pools, never the corpus, and holds at most twice the pool's keys at a time.
"""

from __future__ import annotations

import json

import numpy as np

from ..config import DataSection
from ..errors import BadInput, UserError, error_record, raise_error_record
from ..prep.corpus import InputFile, Rejected, read_documents
from ..prep.examples import is_validation_document
from ..prep.negatives import NegativePool, NegativePools, pool_hash, smallest
from ..prep.process import SPLITS, DocumentProcessor
from .ray_runtime import map_units, unit_files


def _records(records: list[dict]) -> dict:
    """A UDF's output: one JSON record each (an empty one when there is none: a batch holds a row)."""
    return {"record": np.array([json.dumps(r) for r in records] or [json.dumps({})], dtype=object)}


class PoolKeysFn:
    """Ray Data UDF (nsp's first pass): per split, the (hash, key) of the data.nsp_pool_documents
    documents of one work unit with the smallest pool hashes."""

    def __init__(self, data: DataSection, text_field: str):
        self.data, self.text_field = data, text_field

    def __call__(self, batch):
        try:
            return self.keys(batch)
        except UserError as e:  # e.g. a parquet file without the text column: its one line, on the driver
            return _records([error_record(e)])

    def keys(self, batch):
        _, files = unit_files(batch)
        data, k = self.data, self.data.nsp_pool_documents
        found: dict[str, list] = {split: [] for split in SPLITS}
        for f in files:
            for doc in read_documents(f, self.text_field):
                if isinstance(doc, Rejected):
                    continue
                validation = is_validation_document(data.seed, doc.key, data.validation_fraction)
                candidates = found["validation" if validation else "train"]
                candidates.append((pool_hash(data.seed, doc.key), doc.key))
                if len(candidates) >= 2 * k:
                    candidates[:] = smallest(candidates, k)
        return _records([{"split": s, "hash": h, "key": key} for s in SPLITS for h, key in smallest(found[s], k)])


class PoolWindowsFn:
    """Ray Data UDF (nsp's second pass): the windows of one work unit's documents that are in the pools:
    those at or below their split's `last` (hash, key)."""

    def __init__(
        self, spiece_model: bytes, data: DataSection, lowercase: bool, text_field: str, last: dict[str, list | None]
    ):
        self.processor = DocumentProcessor(spiece_model, data, lowercase)
        self.text_field, self.seed = text_field, data.seed
        self.last = {split: tuple(value) for split, value in last.items() if value is not None}

    def __call__(self, batch):
        try:
            return self.windows(batch)
        except UserError as e:
            return _records([error_record(e)])

    def windows(self, batch):
        _, files = unit_files(batch)
        records = []
        for f in files:
            for doc in read_documents(f, self.text_field):
                if isinstance(doc, Rejected):
                    continue
                split, rank = self.processor.split_of(doc), (pool_hash(self.seed, doc.key), doc.key)
                if split in self.last and rank <= self.last[split]:
                    segments = [s.tolist() for s in self.processor.pool_window(doc)]
                    records.append({"split": split, "hash": rank[0], "key": doc.key, "segments": segments})
        return _records(records)


def pool_keys(records, k: int) -> dict[str, list[tuple[int, str]]]:
    """Per split, the `k` smallest (hash, key) of PoolKeysFn's records of every unit, in order."""
    found: dict[str, list] = {split: [] for split in SPLITS}
    for record in records:
        raise_error_record(record)
        if record:
            candidates = found[record["split"]]
            candidates.append((record["hash"], record["key"]))
            if len(candidates) >= 2 * k:
                candidates[:] = smallest(candidates, k)
    return {split: smallest(candidates, k) for split, candidates in found.items()}


def build_pools(records) -> NegativePools:
    """The pools from PoolWindowsFn's records of every unit, in (hash, key) order; the documents
    without a segment left out. NSP needs two training documents at least."""
    found: dict[str, list] = {split: [] for split in SPLITS}
    for record in records:
        raise_error_record(record)
        if record:
            segments = [np.asarray(s, dtype=np.int32) for s in record["segments"]]
            found[record["split"]].append((record["hash"], record["key"], segments))
    pools = {
        split: NegativePool.build([(key, segments) for _, key, segments in sorted(docs, key=lambda d: d[:2])])
        for split, docs in found.items()
    }
    if len(pools["train"].keys) < 2:
        raise BadInput(
            f"data.sentence_objective=nsp: {len(pools['train'].keys)} training documents with text; "
            "a negative needs another document (use sop or none, or a larger corpus)"
        )
    return NegativePools(**pools)


def sample_pools(files: list[InputFile], workers: int, fn_kwargs: dict) -> NegativePools:
    """Both splits' pools, through the two passes. `fn_kwargs`: the data stage's spiece_model, data,
    lowercase and text_field."""
    data, text_field = fn_kwargs["data"], fn_kwargs["text_field"]
    keys = pool_keys(
        map_units(files, workers, PoolKeysFn, dict(data=data, text_field=text_field)), data.nsp_pool_documents
    )
    last = {split: list(found[-1]) if found else None for split, found in keys.items()}
    return build_pools(map_units(files, workers, PoolWindowsFn, {**fn_kwargs, "last": last}))


__all__ = ["PoolKeysFn", "PoolWindowsFn", "build_pools", "pool_keys", "sample_pools"]
