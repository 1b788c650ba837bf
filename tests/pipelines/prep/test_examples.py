import hashlib

import numpy as np
import pytest

from pipelines.prep.examples import (
    PairingSpec,
    assemble,
    create_pairs,
    create_spans,
    document_examples,
    document_rng,
    is_validation_document,
    split_long_segments,
    truncate_pair,
)
from pipelines.prep.masking import CLS_ID, SEP_ID, MaskingSpec
from pipelines.prep.negatives import NegativePool


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


def test_sop_examples_are_what_they_were_before_the_sentence_objective_key():
    """data.sentence_objective=sop (the default) computes exactly what the pairing did before the
    key existed: the examples of a fixed document, hashed at that version."""
    segments = [np.arange(100 * i, 100 * i + 5 + i % 7) for i in range(1, 40)]
    digest = hashlib.sha256()
    for dupe in range(3):
        rng = document_rng(12345, "d:0", dupe)
        masking = MaskingSpec(0.15, 6, 3, 5000)
        for ex in document_examples(segments, PairingSpec(48, 0.1), masking, np.ones(5000, bool), rng, True):
            parts = (ex.input_ids, ex.token_type_ids, ex.masked.positions, ex.masked.labels, [ex.sentence_order_label])
            for part in parts:
                digest.update(np.ascontiguousarray(part, dtype=np.int64).tobytes())
    assert digest.hexdigest() == "486a478ba1258c4582f7e9f720909cb38b2c723634bbb5118736c34b9b4c6a33"


OWN_KEY = "own.txt:0"


def nsp_pool() -> NegativePool:
    """Four other documents (tokens from 10,000 on) and the document itself (below 10,000)."""
    others = [
        (f"other{j}.txt:0", [np.arange(10_000 * j + 100 * i, 10_000 * j + 100 * i + 8) for i in range(12)])
        for j in range(1, 5)
    ]
    return NegativePool.build([*others, (OWN_KEY, own_segments())])


def own_segments() -> list[np.ndarray]:
    # segment i holds tokens 100*i .. 100*i+7: a token's segment is token // 100
    return [np.arange(100 * i, 100 * i + 8) for i in range(1, 30)]


def test_nsp_positives_continue_a_negatives_come_from_another_document_and_the_rest_is_put_back():
    spec, pool = PairingSpec(max_seq_length=64, short_seq_prob=0.1, objective="nsp"), nsp_pool()
    labels = []
    for seed in range(100):
        pairs = create_spans(own_segments(), spec, np.random.default_rng(seed), pool, OWN_KEY)
        next_segment = 1  # the examples tile the document in order: each starts where the last one's text ended
        for pair in pairs:
            a, b = pair.tokens_a // 100, pair.tokens_b // 100
            assert len(pair.tokens_a) + len(pair.tokens_b) <= spec.max_num_tokens
            assert a.min() == next_segment and (np.diff(a) >= 0).all()
            if pair.sentence_order_label == 0:  # B is what follows A in its document
                assert b.max() < 100 and b.min() == a.max() + 1 and (np.diff(b) >= 0).all()
                next_segment = b.max() + 1
            else:  # B: consecutive segments of one other document; A's unused segments are put back
                other = pair.tokens_b // 10_000
                assert other.min() >= 1 and (other == other[0]).all()
                assert (np.diff(pair.tokens_b % 10_000 // 100) >= 0).all()
                next_segment = a.max() + 1
            labels.append(pair.sentence_order_label)
    assert 0.44 < np.mean(labels) < 0.56 and len(labels) > 500


def test_an_nsp_negative_never_draws_from_its_own_document():
    pool = NegativePool.build([(OWN_KEY, own_segments()), ("other.txt:0", [np.arange(20_000, 20_008)])])
    rng = np.random.default_rng(0)
    drawn = [pool.draw(OWN_KEY, 30, rng) for _ in range(200)]
    assert all((b == np.arange(20_000, 20_008)).all() for b in drawn)  # the only other document, whole
    assert pool.others(OWN_KEY) == 1 and pool.others("absent.txt:0") == 2
    # at least the tokens asked for, from a random segment on, unless its document ends first
    long_doc = NegativePool.build([("x.txt:0", own_segments())])
    for _ in range(100):
        b = long_doc.draw(OWN_KEY, 20, rng)
        assert len(b) >= 20 or b[-1] == own_segments()[-1][-1]
        assert (np.diff(b) > 0).all()


def test_none_makes_one_segment_examples_that_tile_the_document():
    spec = PairingSpec(max_seq_length=66, short_seq_prob=0.0, objective="none")  # 64 tokens: 8 whole segments
    spans = create_spans(own_segments(), spec, np.random.default_rng(0))
    assert all(p.tokens_b is None and p.sentence_order_label is None for p in spans)
    assert np.array_equal(np.concatenate([p.tokens_a for p in spans]), np.concatenate(own_segments()))
    assert [len(p.tokens_a) for p in spans] == [64, 64, 64, 40]
    ids, types = assemble(np.array([7, 8]), None)
    assert ids.tolist() == [CLS_ID, 7, 8, SEP_ID] and types.tolist() == [0, 0, 0, 0]
    # a one-sentence document makes an example: no pair is needed
    masking = MaskingSpec(0.15, 5, 3, 5000)
    spec = PairingSpec(max_seq_length=32, short_seq_prob=0.1, objective="none")
    rng = np.random.default_rng(1)
    (one,) = document_examples([np.arange(5, 12)], spec, masking, np.ones(5000, bool), rng, True)
    assert one.input_ids[0] == CLS_ID and one.input_ids[-1] == SEP_ID and len(one.input_ids) == 9
    assert not one.token_type_ids.any() and one.sentence_order_label is None and len(one.masked.positions) == 1


def test_nsp_without_a_pool_is_refused():
    with pytest.raises(ValueError, match="needs a pool"):
        create_spans(own_segments(), PairingSpec(64, 0.0, "nsp"), np.random.default_rng(0))
