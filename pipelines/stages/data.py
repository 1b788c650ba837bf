"""`albert-ray data`: masked-LM examples with a sentence objective (SOP, NSP or none) from the corpus,
as parquet shards, through Ray Data.

Each Ray Data actor holds the tokenizer and turns one work unit (a group of files) at a time into
examples, writing its own shards into the folder being built (pipelines/rundir/lifecycle.py: it replaces
the current output only when complete); nothing but counters comes back to the driver, so memory
does not grow with the corpus. A shard's rows are written in a seeded order, in row groups of
data.row_group_rows rows: the unit in which pretraining shuffles and reads (pipelines/train/input.py).
With data.sentence_objective=nsp, two passes before it gather the pools that negatives are drawn
from (pipelines/stages/data_pool.py), handed to every actor of this one.
"""

from __future__ import annotations

import hashlib
import json
import logging

import numpy as np
import pyarrow.parquet as pq

from ..config import DataSection, config_to_dict
from ..errors import UserError, error_record, raise_error_record
from ..prep.corpus import Rejected, list_inputs, read_documents
from ..prep.negatives import NegativePools
from ..prep.process import SPLITS, DocumentProcessor, PrepStats, ShardBuffer
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import stage_dir
from ..storage import filesystem, join, read_bytes
from .data_pool import sample_pools
from .ray_runtime import init_ray, map_units, resolve_num_workers, unit_files

log = logging.getLogger(__name__)

SHARD_EXAMPLES = 16384  # rows per parquet file at most: bounds a worker's buffer


class CreateExamplesFn:
    """Ray Data UDF: one work unit -> parquet shards in the output folder + its counters."""

    def __init__(
        self,
        spiece_model: bytes,
        data: DataSection,
        lowercase: bool,
        text_field: str,
        out_dir: str,
        pools: NegativePools | None = None,
    ):
        self.processor = DocumentProcessor(spiece_model, data, lowercase, pools)
        self.text_field, self.out_dir = text_field, out_dir
        self.seed, self.row_group_rows = data.seed, data.row_group_rows
        self.dynamic, self.labelled = data.masking == "dynamic", data.sentence_objective != "none"

    def __call__(self, batch):
        try:
            return self.create_examples(batch)
        except UserError as e:  # e.g. a parquet file without the text column: its one line, on the driver
            return {"record": np.array([json.dumps(error_record(e))], dtype=object)}

    def create_examples(self, batch):
        unit, files = unit_files(batch)
        stats = PrepStats()
        buffers = {split: ShardBuffer(self.dynamic, self.labelled) for split in SPLITS}
        parts = dict.fromkeys(SPLITS, 0)

        def flush(split: str) -> None:
            if len(buffers[split]):
                fs, path = filesystem(join(self.out_dir, split, f"part-{unit:05d}-{parts[split]:03d}.parquet"))
                fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
                # rows in a seeded order, so that a row group mixes the shard's documents
                table = buffers[split].to_table()
                order = np.random.default_rng([self.seed, unit, SPLITS.index(split), parts[split]])
                table = table.take(order.permutation(table.num_rows))
                pq.write_table(table, path, filesystem=fs, row_group_size=self.row_group_rows)
                parts[split] += 1
                buffers[split].clear()

        for f in files:
            for doc in read_documents(f, self.text_field):
                if isinstance(doc, Rejected):
                    stats.reject(doc)
                    continue
                self.processor.process(doc, buffers, stats)
                for split in SPLITS:
                    if len(buffers[split]) >= SHARD_EXAMPLES:
                        flush(split)
        for split in SPLITS:
            flush(split)
        return {"record": np.array([json.dumps(stats.to_dict())], dtype=object)}


LABEL_1_SHARE = {"sop": "swapped_share", "nsp": "random_next_share"}
"""The statistic of the sentence label 1's share, by objective (none has no label)."""


def summarize(stats: PrepStats, objective: str = "sop") -> dict:
    """Shares a reader checks against the specification."""
    masked = max(1, stats.masked_tokens)
    examples = max(1, sum(stats.examples.values()))
    ngrams = max(1, sum(stats.ngram_lengths.values()))
    labels = (
        {LABEL_1_SHARE[objective]: stats.sentence_order_labels.get("1", 0) / examples}
        if objective in LABEL_1_SHARE
        else {}
    )
    return {
        "masked_share": stats.masked_tokens / max(1, stats.maskable_tokens),
        "replacement_shares": {k: v / masked for k, v in stats.replacements.items()},
        "ngram_length_shares": {k: v / ngrams for k, v in sorted(stats.ngram_lengths.items())},
        **labels,
        "short_share": stats.short_examples / examples,
    }


def build_data(run: StageRun) -> dict:
    """{train,validation}/*.parquet in the stage's folder; returns the manifest's fields."""
    config = run.config
    files = list_inputs(config.corpus.paths, config.corpus.format)
    stats = PrepStats()
    usable = stats.reject_unlisted(files)
    if not usable:
        stats.require_used()
    spiece_model = read_bytes(join(stage_dir(config, "vocab"), "spiece.model"))
    init_ray()
    workers = resolve_num_workers(config.data.num_workers)
    objective = config.data.sentence_objective
    fn_kwargs = dict(
        spiece_model=spiece_model,
        data=config.data,
        lowercase=config.vocab.lowercase,
        text_field=config.corpus.text_field,
    )
    pools = sample_pools(usable, workers, fn_kwargs) if objective == "nsp" else None
    for record in map_units(usable, workers, CreateExamplesFn, {**fn_kwargs, "out_dir": run.out, "pools": pools}):
        raise_error_record(record)
        stats.merge(PrepStats.from_dict(record))
    stats.require_used()
    log.info("%s examples from %d of %d documents", dict(stats.examples), stats.documents_used, stats.documents_read)
    return {
        "inputs": [
            {"path": f.url, "source": f.source, "bytes": f.size, "format": f.format}
            | ({"rejected": f.rejected} if f.rejected else {})
            for f in files
        ],
        "documents": {
            "read": stats.documents_read,
            "used": stats.documents_used,
            "rejected": dict(stats.documents_rejected),
            "rejection_examples": stats.rejection_examples,
            "with_replaced_bytes": stats.documents_with_replaced_bytes,
        },
        "text_bytes_used": stats.text_bytes,
        "examples": {s: stats.examples.get(s, 0) for s in SPLITS},
        "tokens": {s: stats.tokens.get(s, 0) for s in SPLITS},
        "masking": {
            "mode": config.data.masking,
            "masked_tokens": stats.masked_tokens,
            "replacements": dict(stats.replacements),
            "ngram_lengths": dict(stats.ngram_lengths),
        },
        "sentence_objective": objective,
        "sentence_order_labels": dict(stats.sentence_order_labels),
        **({"nsp_pool": pool_sizes(pools)} if pools is not None else {}),
        "short_examples": stats.short_examples,
        "statistics": summarize(stats, objective),
        "vocab_sha256": hashlib.sha256(spiece_model).hexdigest(),
        "config": config_to_dict(config),
        "num_workers": workers,
    }


def pool_sizes(pools: NegativePools) -> dict:
    """The manifest's account of the NSP pools: documents and tokens per split."""
    return {
        split: {"documents": len(pool.keys), "tokens": len(pool.tokens)}
        for split, pool in (("train", pools.train), ("validation", pools.validation))
    }


run_data = stage_runner("data")
