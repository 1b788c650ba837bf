"""The pretraining input read with pyarrow (pipelines/train/input.py): whole batches, every row at
most once per epoch, the same global batches for any number of workers and after a start at any
batch, each worker decoding only its share."""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.train.input import SliceReader, lane_rows, ordered_batches


@pytest.fixture
def split(tmp_path):
    """103 rows in 5 files (names out of write order), 2-3 row groups each."""
    folder = tmp_path / "train"
    folder.mkdir()
    start = 0
    for part, rows in [(3, 30), (0, 17), (4, 21), (1, 20), (2, 15)]:
        ids = list(range(start, start + rows))
        pq.write_table(
            pa.table({"row": ids, "file": [part] * rows}), folder / f"part-{part:05d}.parquet", row_group_size=8
        )
        start += rows
    (folder / "_SUCCESS").write_text("")  # not parquet: ignored
    return str(folder)


def rows_of(batches):
    return [b.column("row").to_pylist() for b in batches]


def test_ordered_batches_are_whole_and_in_file_order(split):
    batches = list(ordered_batches(split, 10))
    assert [b.num_rows for b in batches] == [10] * 10  # 103 rows: the last 3 dropped
    files = [f for b in batches for f in b.column("file").to_pylist()]
    assert files == sorted(files)  # part-00000 first, whatever order they were written in
    assert rows_of(ordered_batches(split, 10)) == rows_of(batches)


def test_a_split_without_parquet_is_named(tmp_path):
    (tmp_path / "validation").mkdir()
    with pytest.raises(FileNotFoundError, match=r"validation: no parquet files"):
        next(ordered_batches(str(tmp_path / "validation"), 4))


# --- SliceReader: each worker reads its share of every global batch alone ---


def shares(split, batch_size, world, epoch=0, first=0, seed=5):
    """Per batch, the rows of ranks 0..world-1 concatenated."""
    readers = [SliceReader(split, batch_size, r, world, seed) for r in range(world)]
    per_rank = [[b.column("row").to_pylist() for b in r.epoch(epoch, first)] for r in readers]
    return [sum((rank[k] for rank in per_rank), []) for k in range(len(per_rank[0]))]


def test_an_epoch_takes_each_row_at_most_once_and_repeats_per_seed(split):
    batches = shares(split, 8, 1)
    assert len(batches) == 12 and all(len(b) == 8 for b in batches)  # 103 rows: 96 drawn
    drawn = [r for b in batches for r in b]
    assert len(set(drawn)) == 96 and set(drawn) <= set(range(103))
    assert shares(split, 8, 1) == batches
    assert shares(split, 8, 1, seed=6) != batches and shares(split, 8, 1, epoch=1) != batches
    assert drawn != sorted(drawn)
    # the first batch already spans row groups of several files
    assert len({r // 8 for r in batches[0]}) > 1


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_global_batches_do_not_depend_on_the_worker_count(split, world):
    assert shares(split, 8, world) == shares(split, 8, 1)  # shares cross row groups and files


def test_a_batch_draws_each_row_from_another_lane_far_apart_in_the_epoch(split):
    """Batch of 8: 8 lanes of 12 rows of the epoch's sequence, one row from each per batch, so
    every batch's rows come from 8 different row groups (of 8 rows), spread over the files."""
    groups = {}  # row -> (file, row group), as the fixture wrote them
    for path in sorted(Path(split).glob("*.parquet")):
        parquet = pq.ParquetFile(path)
        for g in range(parquet.num_row_groups):
            for row in parquet.read_row_group(g).column("row").to_pylist():
                groups[row] = (path.name, g)
    for batch in shares(split, 8, 1):
        assert len({groups[r] for r in batch}) == 8, batch
    assert [lane_rows(b) for b in (8, 128, 256, 300, 512, 4096, 257)] == [1, 1, 1, 2, 2, 16, 257]


def big_split(tmp_path, files=4, rows=256, group=8):
    folder = tmp_path / "train"
    folder.mkdir(parents=True)
    for part in range(files):
        ids = list(range(part * rows, (part + 1) * rows))
        pq.write_table(pa.table({"row": ids}), folder / f"part-{part:05d}.parquet", row_group_size=group)
    return str(folder)


def test_a_start_at_batch_k_reads_nothing_before_it(tmp_path):
    split = big_split(tmp_path)  # 1,024 rows in groups of 8: 128 batches of 8 (8 lanes of 128 rows)
    whole = shares(split, 8, 1, epoch=2)
    for k in (0, 64, 127):
        reader = SliceReader(split, 8, 0, 1, 5)
        batch = next(reader.epoch(2, k))
        assert batch.column("row").to_pylist() == whole[k]
        # one row group per lane (8 rows each), whatever k: not the 8k rows before it
        assert reader.rows_decoded == 8 * 8


def test_each_worker_decodes_only_its_share(tmp_path):
    split = big_split(tmp_path, files=4, rows=32, group=4)  # 128 rows
    readers = [SliceReader(split, 16, r, 2, 0) for r in range(2)]
    seen = [[x for b in reader.epoch(0) for x in b.column("row").to_pylist()] for reader in readers]
    assert sorted(seen[0] + seen[1]) == list(range(128))  # 8 whole batches, 8 rows per worker each
    assert [r.rows_decoded for r in readers] == [64, 64]  # half the split each, every row once
    # a share of 2 rows, smaller than a row group: still each worker its own lanes, half the split
    small = [SliceReader(split, 4, r, 2, 0) for r in range(2)]
    assert [sum(1 for _ in r.epoch(0)) for r in small] == [32, 32]
    assert [r.rows_decoded for r in small] == [64, 64]
    # lanes that meet inside a row group: each decodes it, the only overlap (batch 6: 4 lanes of 21)
    odd = big_split(tmp_path / "odd", files=1, rows=128, group=4)
    assert shares(odd, 6, 3, seed=0) == shares(odd, 6, 1, seed=0)
    uneven = [SliceReader(odd, 6, r, 3, 0) for r in range(3)]
    assert [sum(1 for _ in r.epoch(0)) for r in uneven] == [21, 21, 21]
    assert all(r.rows_decoded <= 128 // 3 + 2 * 4 for r in uneven), [r.rows_decoded for r in uneven]


def test_a_batch_that_does_not_split_over_the_workers_is_refused(split):
    with pytest.raises(ValueError, match="does not split over 3 workers"):
        SliceReader(split, 8, 0, 3, 0)
