"""The pretraining input, side by side in one Ray session: a pass over a data split read the way
the Ray Train workers read it now (pyarrow in the process: pipelines/train/input.py) and the way
they read it before (a Ray Data dataset, `iter_batches` with a local shuffle buffer), each from a
1-CPU Ray task as a training worker would.

    .venv/bin/albert-ray data --config configs/tiny.yaml run_dir=/tmp/albert-input
    .venv/bin/python bench/pretrain_input.py /tmp/albert-input/data/train --batch-size 8 --buffer 64

Prints a markdown row per reader: rows per pass and the seconds of each pass (the first includes
imports and, for Ray Data, starting its read tasks' workers).
"""

from __future__ import annotations

import argparse
import time

import ray


@ray.remote(num_cpus=1)
def pyarrow_passes(split: str, batch_size: int, buffer: int, passes: int) -> list[tuple[int, float]]:
    from pipelines.train.input import SliceReader

    out = []
    for seed in range(passes):
        start = time.perf_counter()
        rows = sum(b.num_rows for b in SliceReader(split, batch_size, 0, 1, seed).epoch(0))
        out.append((rows, time.perf_counter() - start))
    return out


@ray.remote(num_cpus=1)
def ray_data_passes(split: str, batch_size: int, buffer: int, passes: int) -> list[tuple[int, float]]:
    from pipelines.storage import arrow_filesystem

    ray.data.DataContext.get_current().enable_progress_bars = False
    fs, path = arrow_filesystem(split)
    out = []
    for seed in range(passes):
        start = time.perf_counter()
        ds = ray.data.read_parquet(path, filesystem=fs, file_extensions=["parquet"])
        batches = ds.iter_batches(
            batch_size=batch_size,
            batch_format="pyarrow",
            drop_last=True,
            local_shuffle_buffer_size=max(buffer, batch_size),
            local_shuffle_seed=seed,
        )
        rows = sum(b.num_rows for b in batches)
        out.append((rows, time.perf_counter() - start))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("split", help="a data split folder ({run_dir}/data/train), local or s3://")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--buffer", type=int, default=64)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray session (the tests': 4)")
    args = parser.parse_args()
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, logging_level="ERROR")
    print("| reader | rows per pass | seconds per pass |\n|---|---:|---|")
    for name, reader in (("pyarrow in the worker", pyarrow_passes), ("Ray Data", ray_data_passes)):
        passes = ray.get(reader.remote(args.split, args.batch_size, args.buffer, args.passes))
        print(f"| {name} | {passes[0][0]:,} | {', '.join(f'{s:.2f}' for _, s in passes)} |", flush=True)


if __name__ == "__main__":
    main()
