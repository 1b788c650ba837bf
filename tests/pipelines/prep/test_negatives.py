import numpy as np

from pipelines.prep.negatives import NegativePool, NegativePools, pool_hash, pool_window, smallest


def segments(n: int, length: int = 8) -> list[np.ndarray]:
    return [np.arange(100 * i, 100 * i + length) for i in range(n)]


def test_a_pool_window_is_the_document_or_a_seeded_run_of_whole_segments():
    assert [s.tolist() for s in pool_window(segments(3), 0, "a:0", 24)] == [s.tolist() for s in segments(3)]
    windows = set()
    for key in (f"doc{i}:0" for i in range(50)):
        window = pool_window(segments(20), 0, key, 30)
        starts = [int(s[0]) // 100 for s in window]
        assert starts == list(range(starts[0], starts[0] + 3))  # consecutive, 3 x 8 <= 30 < 4 x 8
        assert [s.tolist() for s in window] == [s.tolist() for s in pool_window(segments(20), 0, key, 30)]
        windows.add(starts[0])
    assert len(windows) > 10  # the start depends on the document
    long = [np.arange(40)]
    assert pool_window(long, 0, "a:0", 30)[0].tolist() == list(range(40))  # at least one segment


def test_the_pool_is_the_same_for_any_grouping_of_the_documents():
    """Each unit keeps its k smallest; the driver keeps the k smallest of those: the k smallest of
    the corpus whatever the units, documents without text (no segment) left out only at the end."""
    rng = np.random.default_rng(0)
    docs = [(pool_hash(1, f"f{i}.txt:0"), f"f{i}.txt:0", [] if i % 7 == 0 else [[i, i + 1]]) for i in range(300)]
    k = 20
    expected = smallest(docs, k)
    for parts in (1, 3, 17):
        cut = np.sort(rng.choice(np.arange(1, len(docs)), parts - 1, replace=False))
        merged = []
        for unit in np.split(np.arange(len(docs)), cut):
            merged += smallest([docs[i] for i in unit], k)
            if len(merged) >= 2 * k:
                merged = smallest(merged, k)
        assert smallest(merged, k) == expected
    pool = NegativePool.build([(key, [np.array(s) for s in segs]) for _, key, segs in expected])
    assert pool.keys == tuple(key for _, key, segs in expected if segs)


def test_a_split_without_another_document_draws_from_the_training_pool():
    train = NegativePool.build([("t1:0", segments(2)), ("t2:0", segments(2))])
    alone = NegativePool.build([("v1:0", segments(2))])
    pools = NegativePools(train, alone)
    assert pools.for_document("validation", "v1:0") is train
    assert pools.for_document("validation", "v2:0") is alone
    assert pools.for_document("train", "t1:0") is train
