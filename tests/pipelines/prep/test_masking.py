from collections import Counter

import numpy as np
import pytest

from pipelines.prep.masking import (
    CLS_ID,
    FIRST_ORDINARY_ID,
    MASK_ID,
    SEP_ID,
    MaskingSpec,
    mask_tokens,
    word_spans,
    word_start_table,
)


def test_word_start_table_marks_space_pieces_punctuation_and_symbols():
    table = word_start_table(["<pad>", "[CLS]", "\u2581the", "re", ".", "\u2581", "ing", "<unk>"])
    assert table.tolist() == [True, False, True, False, True, True, False, True]


def test_word_spans_skip_control_symbols_and_join_continuations():
    ids = np.array([CLS_ID, 10, 11, 12, SEP_ID, 13, 14, SEP_ID])
    starts = np.array([False, True, False, True, False, False, True, False])
    # [CLS] |10 11| |12| [SEP] |13| |14| [SEP]: a piece right after [SEP] starts a word.
    assert word_spans(ids, starts).tolist() == [[1, 3], [3, 4], [5, 6], [6, 7]]


def make_ids(rng, n_words=100, vocab=1000):
    ids, starts = [CLS_ID], [False]
    for w in range(n_words):
        pieces = rng.choice([1, 2, 3], p=[0.75, 0.2, 0.05])  # pieces per word, as in English text
        ids.extend(rng.integers(FIRST_ORDINARY_ID, vocab, size=pieces).tolist())
        starts.extend([True] + [False] * (pieces - 1))
        if w == n_words // 2:
            ids.append(SEP_ID)
            starts.append(False)
    ids.append(SEP_ID)
    starts.append(False)
    return np.array(ids), np.array(starts)


def test_masking_statistics_and_invariants():
    spec = MaskingSpec(masked_lm_prob=0.15, max_predictions_per_seq=20, ngram=3, vocab_size=1000)
    rng = np.random.default_rng(0)
    kinds, ngrams = Counter(), Counter()
    for _ in range(400):
        ids, starts = make_ids(rng)
        ex = mask_tokens(ids, starts, spec, rng)
        assert len(ex.positions) == spec.num_to_predict(len(ids))
        assert np.all(np.diff(ex.positions) > 0)  # ascending, no duplicates
        assert not np.isin(ids[ex.positions], [CLS_ID, SEP_ID]).any()
        assert np.array_equal(ex.labels, ids[ex.positions])
        untouched = np.setdiff1d(np.arange(len(ids)), ex.positions)
        assert np.array_equal(ex.input_ids[untouched], ids[untouched])
        random = ex.positions[ex.replacement == 2]
        assert (ex.input_ids[random] >= FIRST_ORDINARY_ID).all()  # never a control symbol
        assert (ex.input_ids[ex.positions[ex.replacement == 0]] == MASK_ID).all()
        kinds.update(ex.replacement.tolist())
        ngrams.update(ex.ngram_lengths.tolist())
    total = sum(kinds.values())
    assert abs(kinds[0] / total - 0.8) < 0.02 and abs(kinds[1] / total - 0.1) < 0.02
    # Near 6/11, 3/11, 2/11: an n-gram that overflows the budget is shrunk (as in the original),
    # which moves a few points from 3- and 2-grams to 1-grams.
    n_total = sum(ngrams.values())
    for n, p in zip((1, 2, 3), (6 / 11, 3 / 11, 2 / 11)):
        assert abs(ngrams[n] / n_total - p) < 0.06


def test_whole_words_are_masked_together():
    spec = MaskingSpec(0.15, 20, 1, 1000)
    rng = np.random.default_rng(1)
    ids, starts = make_ids(rng)
    spans = word_spans(ids, starts)
    for _ in range(50):
        ex = mask_tokens(ids, starts, spec, rng)
        chosen = set(ex.positions.tolist())
        for s, e in spans:
            inside = [p in chosen for p in range(s, e)]
            assert all(inside) or not any(inside)


def test_num_to_predict_rounds_and_caps():
    spec = MaskingSpec(0.15, 20, 3, 1000)
    assert spec.num_to_predict(128) == 19
    assert spec.num_to_predict(512) == 20
    assert spec.num_to_predict(3) == 1
    assert spec.ngram_probabilities() == pytest.approx([6 / 11, 3 / 11, 2 / 11])


def test_same_generator_state_gives_same_masks():
    spec = MaskingSpec(0.15, 20, 3, 1000)
    ids, starts = make_ids(np.random.default_rng(3))
    a = mask_tokens(ids, starts, spec, np.random.default_rng(7))
    b = mask_tokens(ids, starts, spec, np.random.default_rng(7))
    c = mask_tokens(ids, starts, spec, np.random.default_rng(8))
    assert np.array_equal(a.input_ids, b.input_ids) and np.array_equal(a.positions, b.positions)
    assert not np.array_equal(a.positions, c.positions)
