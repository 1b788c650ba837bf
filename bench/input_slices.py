"""Pretraining input at cluster scale, side by side in one run: the reader the workers use
(`SliceReader`, pipelines/train/input.py: up to 256 lanes far apart in a seeded order of the row
groups, each worker decoding only its own lanes, and a start at batch k computing where each lane
is) and the reader before it (every worker reads the whole split through a seeded shuffle buffer,
keeps its slice of each global batch and skips batch by batch to a resume point; kept here, as of
commit b38bb27, as the peer).

    .venv/bin/albert-ray vocab --config configs/learning-tiny.yaml run_dir=/tmp/albert-slices
    .venv/bin/albert-ray data --config configs/learning-tiny.yaml data.dupe_factor=4 run_dir=/tmp/albert-slices
    (the same two at sequence 512: data.max_seq_length=512 run_dir=/tmp/albert-512)
    .venv/bin/python bench/input_slices.py /tmp/albert-slices/data --before /tmp/albert-slices-before/data \
        --throughput-data /tmp/albert-512/data

`--before`: the same commands' output from the data stage before this change (git checkout b38bb27:
document order, a row group per file), which the peer reads as it did; default: the same folder.

Per worker count W, each rank runs two epochs in a fresh process and reports, for the second (what
every epoch costs once a reader runs), the rows it decoded and the bytes it read (`rchar` of
/proc/self/io: every byte its read calls returned, page cache included), and apart from them the
bytes of the reader's start (the footers it reads to index the split). Then the seconds from a
fresh reader at batch k (0%, 50%, 99% of the epoch) to that batch in hand; the input path alone
(parquet -> collated, padded tensors, one process) in sequences per second; and, as the measure of
shuffle quality, how many distinct documents each global batch draws from. Prints markdown tables
for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.train.input import SliceReader, row_groups


class BufferReader:
    """The peer: the whole split read by every worker, in file order, through a seeded buffer."""

    def __init__(self, split: str, batch_size: int, rank: int, world: int, seed: int, buffer: int = 10_000):
        self.split, self.batch_size, self.rank, self.world = split, batch_size, rank, world
        self.seed, self.buffer, self.rows_decoded = seed, buffer, 0

    def _row_groups(self) -> Iterator[pa.Table]:
        for table in row_groups(self.split):
            self.rows_decoded += table.num_rows
            yield table

    def _global_batches(self, epoch: int) -> Iterator[pa.Table]:
        rng = np.random.default_rng(self.seed * 1_000_003 + epoch)
        fill = max(self.buffer, self.batch_size)
        table, live = None, np.zeros(0, dtype=np.int64)

        def draw() -> pa.Table:
            nonlocal live
            pick = rng.choice(len(live), self.batch_size, replace=False)
            rows, keep = live[pick], np.ones(len(live), dtype=bool)
            keep[pick] = False
            live = live[keep]
            return table.take(rows)

        for chunk in self._row_groups():
            if table is None:
                table, live = chunk, np.arange(chunk.num_rows, dtype=np.int64)
            else:
                live = np.concatenate([live, np.arange(table.num_rows, table.num_rows + chunk.num_rows)])
                table = pa.concat_tables([table, chunk])
                if table.num_rows > 2 * len(live) + fill or table.column(0).num_chunks > 64:
                    table, live = table.take(live), np.arange(len(live), dtype=np.int64)
            while len(live) >= fill:
                yield draw()
        while table is not None and len(live) >= self.batch_size:
            yield draw()

    def epoch(self, epoch: int, first_batch: int = 0) -> Iterator[pa.Table]:
        share = self.batch_size // self.world
        for k, table in enumerate(self._global_batches(epoch)):
            if k >= first_batch:  # a resume skips by reading
                yield table.slice(self.rank * share, share)


READERS = {"sliced (now)": SliceReader, "buffer (before)": BufferReader}


def rchar() -> int:
    return int(next(x for x in Path("/proc/self/io").read_text().splitlines() if x.startswith("rchar")).split()[1])


def warm_up() -> None:
    """Load what pyarrow and numpy load lazily on first use, so that rchar counts reads of data."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": [[1, 2], [3]]}), sink)
    pq.read_table(pa.BufferReader(sink.getvalue())).to_pylist()
    np.random.default_rng([1, 2]).permutation(3)


def one_rank(args: tuple) -> dict:
    """One worker's reader: the bytes of its start (footers), then two epochs, counted apart."""
    reader_name, split, batch_size, rank, world = args
    warm_up()
    before = rchar()
    reader = READERS[reader_name](split, batch_size, rank, world, 42)
    start_bytes = rchar() - before
    out = {"start_bytes": start_bytes, "epochs": []}
    for epoch in (0, 1):
        before, decoded, start = rchar(), reader.rows_decoded, time.perf_counter()
        rows = sum(t.num_rows for t in reader.epoch(epoch))
        out["epochs"].append(
            {
                "rows_used": rows,
                "rows_decoded": reader.rows_decoded - decoded,
                "bytes_read": rchar() - before,
                "s": time.perf_counter() - start,
            }
        )
    return out


def first_batch_seconds(args: tuple) -> float:
    reader_name, split, batch_size, k = args
    start = time.perf_counter()
    reader = READERS[reader_name](split, batch_size, 0, 1, 42)
    next(reader.epoch(0, k))
    return time.perf_counter() - start


def documents_per_batch(args: tuple) -> list[int]:
    """Distinct source documents in each global batch of epoch 0 (example ids are doc/dupe/i)."""
    reader_name, split, batch_size = args
    reader = READERS[reader_name](split, batch_size, 0, 1, 42)
    return [len({i.rsplit("/", 2)[0] for i in t.column("example_id").to_pylist()}) for t in reader.epoch(0)]


def input_path(args: tuple) -> tuple[int, float]:
    """Sequences per second from parquet to collated, padded tensors in this process."""
    from pipelines.train.loader import rank_micro_batches

    reader_name, split, batch_size, max_predictions, seconds = args
    reader = READERS[reader_name](split, batch_size, 0, 1, 42)
    sequences, width, epoch, start = 0, 0, 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for table in reader.epoch(epoch):
            (batch,) = rank_micro_batches(table, 0, 1, batch_size, max_predictions)
            sequences, width = sequences + batch["input_ids"].shape[0], max(width, batch["input_ids"].shape[1])
            if time.perf_counter() - start >= seconds:
                break
        epoch += 1
    return sequences, time.perf_counter() - start, width


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="a data stage's folder ({run_dir}/data)")
    parser.add_argument("--before", help="the data stage's folder as written before (for the peer)")
    parser.add_argument("--batch-size", type=int, default=128, help="global batch (sequences)")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--throughput-data", help="another data folder for the input-path rate (e.g. sequence 512)")
    parser.add_argument("--throughput-batch", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    splits = {"sliced (now)": f"{args.data}/train", "buffer (before)": f"{args.before or args.data}/train"}
    n = json.loads(Path(args.data, "manifest.json").read_text())["examples"]["train"]
    sizes = {name: sum(p.stat().st_size for p in Path(split).glob("*.parquet")) for name, split in splits.items()}
    for name, split in splits.items():
        print(f"{name}: {split}, {sizes[name] / 1e6:.1f} MB of parquet")
    print(f"{n:,} examples\n")
    ctx = mp.get_context("spawn")
    print(
        "| reader | W | rows decoded per worker per epoch (share of split) | MB read per worker per epoch "
        "(share) | MB read at a reader's start (footers) | s per worker, epoch 0 |"
    )
    print("|---|---:|---|---|---|---|")
    for name in READERS:
        for world in [int(w) for w in args.workers.split(",")]:
            with ctx.Pool(1, maxtasksperchild=1) as pool:  # a fresh process per rank, one at a time
                ranks = [pool.apply(one_rank, ((name, splits[name], args.batch_size, r, world),)) for r in range(world)]
            # the second epoch: what every epoch costs once the reader is running
            decoded = max(r["epochs"][1]["rows_decoded"] for r in ranks)
            read = max(r["epochs"][1]["bytes_read"] for r in ranks)
            start = max(r["start_bytes"] for r in ranks)
            seconds = ", ".join(f"{r['epochs'][0]['s']:.1f}" for r in ranks)
            print(
                f"| {name} | {world} | {decoded:,} ({decoded / n:.3f}) | {read / 1e6:.1f} ({read / sizes[name]:.3f}) "
                f"| {start / 1e6:.1f} | {seconds} |",
                flush=True,
            )
    print(f"\n| reader | distinct documents per global batch of {args.batch_size}: min / 10th pct / median / mean |")
    print("|---|---|")
    for name in READERS:
        with ctx.Pool(1) as pool:
            docs = np.array(pool.apply(documents_per_batch, ((name, splits[name], args.batch_size),)))
        print(
            f"| {name} | {docs.min()} / {np.percentile(docs, 10):.0f} / {np.median(docs):.0f} / {docs.mean():.1f} |",
            flush=True,
        )
    batches = n // args.batch_size
    points = [0, batches // 2, int(batches * 0.99)]
    print(f"\n| reader | first batch at k = {', '.join(f'{k:,}' for k in points)} of {batches:,} (seconds) |")
    print("|---|---|")
    for name in READERS:
        with ctx.Pool(1) as pool:
            seconds = [pool.apply(first_batch_seconds, ((name, splits[name], args.batch_size, k),)) for k in points]
        print(f"| {name} | {', '.join(f'{s:.2f}' for s in seconds)} |", flush=True)
    if args.throughput_data:
        data = args.throughput_data
        written = json.loads(Path(data, "manifest.json").read_text())["config"]["data"]
        print(f"\n| reader | sequences/s to collated tensors (batch {args.throughput_batch}, widest batch) |")
        print("|---|---|")
        for name in READERS:
            with ctx.Pool(1) as pool:
                sequences, seconds, width = pool.apply(
                    input_path,
                    ((name, f"{data}/train", args.throughput_batch, written["max_predictions_per_seq"], args.seconds),),
                )
            print(f"| {name} | {sequences / seconds:,.0f} ({width} tokens) |", flush=True)


if __name__ == "__main__":
    main()
