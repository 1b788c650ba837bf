"""The pretraining input read with pyarrow (pipelines/train/input.py): whole batches, every row at
most once, the same batches for the same seed, a buffer that mixes files."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.train.input import ordered_batches, shuffled_batches


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


def test_shuffled_batches_take_each_row_at_most_once_and_repeat_per_seed(split):
    batches = list(shuffled_batches(split, 8, buffer_size=40, seed=7))
    assert [b.num_rows for b in batches] == [8] * 12  # 96 of 103 rows
    drawn = [r for rows in rows_of(batches) for r in rows]
    assert len(set(drawn)) == 96 and set(drawn) <= set(range(103))
    assert rows_of(shuffled_batches(split, 8, buffer_size=40, seed=7)) == rows_of(batches)
    assert rows_of(shuffled_batches(split, 8, buffer_size=40, seed=8)) != rows_of(batches)
    # the buffer spans files: the first batch already mixes the first two (17 + 20 rows < 40)
    assert len(set(batches[0].column("file").to_pylist())) > 1
    # and it shuffles: not the file order
    assert drawn != sorted(drawn)


def test_a_buffer_smaller_than_a_batch_still_gives_whole_batches(split):
    batches = list(shuffled_batches(split, 16, buffer_size=1, seed=0))
    assert [b.num_rows for b in batches] == [16] * 6


def test_a_split_without_parquet_is_named(tmp_path):
    (tmp_path / "validation").mkdir()
    with pytest.raises(FileNotFoundError, match=r"validation: no parquet files"):
        next(ordered_batches(str(tmp_path / "validation"), 4))


def test_copying_the_buffer_together_does_not_change_the_batches(split, monkeypatch):
    import pipelines.train.input as input_module

    expected = rows_of(shuffled_batches(split, 8, buffer_size=40, seed=3))
    monkeypatch.setattr(input_module, "MAX_CHUNKS", 1)  # copied at every row group
    assert rows_of(shuffled_batches(split, 8, buffer_size=40, seed=3)) == expected
