import numpy as np

from pipelines.prep.examples import (
    PairingSpec,
    assemble,
    create_pairs,
    document_rng,
    is_validation_document,
    split_long_segments,
    truncate_pair,
)
from pipelines.prep.masking import CLS_ID, SEP_ID


def loop_truncate(la, lb, max_tokens):
    while la + lb > max_tokens:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_truncation_matches_the_original_one_token_loop():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        la, lb, m = (int(x) for x in rng.integers(1, 60, 3))
        a, b = truncate_pair(np.arange(la), np.arange(lb), m, rng)
        assert (len(a), len(b)) == loop_truncate(la, lb, m)
        # Removed from the ends only: what is left is contiguous.
        assert len(a) == 0 or np.all(np.diff(a) == 1)


def test_pairs_keep_document_order_or_swap_it():
    spec = PairingSpec(max_seq_length=64, short_seq_prob=0.0)
    # Segment i holds tokens 100*i .. 100*i+k: order is readable from the values.
    segments = [np.arange(100 * i, 100 * i + 8) for i in range(1, 20)]
    labels = []
    for seed in range(50):
        for pair in create_pairs(segments, spec, np.random.default_rng(seed)):
            assert len(pair.tokens_a) + len(pair.tokens_b) <= spec.max_num_tokens
            first_a, first_b = pair.tokens_a.min(), pair.tokens_b.min()
            assert (first_a < first_b) == (pair.sentence_order_label == 0)
            labels.append(pair.sentence_order_label)
    assert 0.4 < np.mean(labels) < 0.6


def test_single_segment_documents_make_no_pair():
    spec = PairingSpec(max_seq_length=64, short_seq_prob=0.1)
    assert create_pairs([np.arange(10)], spec, np.random.default_rng(0)) == []


def test_short_targets_appear_at_about_short_seq_prob():
    spec = PairingSpec(max_seq_length=128, short_seq_prob=0.1)
    segments = [np.arange(10) for _ in range(400)]
    pairs = [p for seed in range(20) for p in create_pairs(segments, spec, np.random.default_rng(seed))]
    share = np.mean([p.is_short for p in pairs])
    assert 0.06 < share < 0.2


def test_long_segments_are_cut_to_the_budget():
    out = split_long_segments([np.arange(10), np.arange(25)], 8)
    assert [len(s) for s in out] == [8, 2, 8, 8, 8, 1]


def test_layout_and_token_types():
    ids, types = assemble(np.array([7, 8]), np.array([9]))
    assert ids.tolist() == [CLS_ID, 7, 8, SEP_ID, 9, SEP_ID]
    assert types.tolist() == [0, 0, 0, 0, 1, 1]


def test_document_rng_and_split_are_stable_and_seeded():
    a = document_rng(1, "speeches/x.txt:0", 0).random(3)
    assert np.array_equal(a, document_rng(1, "speeches/x.txt:0", 0).random(3))
    assert not np.array_equal(a, document_rng(1, "speeches/x.txt:0", 1).random(3))
    assert not np.array_equal(a, document_rng(2, "speeches/x.txt:0", 0).random(3))
    keys = [f"doc{i}" for i in range(5000)]
    share = np.mean([is_validation_document(12345, k, 0.1) for k in keys])
    assert 0.08 < share < 0.12
