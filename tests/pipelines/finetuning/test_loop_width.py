"""`predict` orders examples by width before batching (less padding): a sequence's tokens, or a
multiple-choice question's longest choice."""

import numpy as np
import torch

from pipelines.finetuning.families.multiple_choice.training import collate as choice_collate
from pipelines.finetuning.loop import example_tokens, example_width, length_batches, predict


def test_a_sequence_and_a_question_are_as_wide_as_their_tokens():
    assert example_width(([2, 7, 3], [0, 0, 0])) == 3
    assert example_width((np.array([2, 7, 7, 3]), np.zeros(4, int))) == 4
    question = [([2, 5, 3], [0, 0, 0]), ([2, 5, 6, 6, 6, 3], [0] * 6), ([2, 3], [0, 0])]
    assert example_width(question) == 6


def test_predict_batches_multiple_choice_questions_of_like_width():
    """Questions of widths 3 and 9 alternating, batches of 2: sorted by width each batch holds two
    of one width, so the narrow batches are collated 3 wide (unsorted every batch would be 9)."""
    widths = []

    class Recorder(torch.nn.Module):
        def forward(self, input_ids, **_):
            widths.append(input_ids.shape[-1])
            return input_ids.float().sum(-1)

    def question(n: int) -> list:
        return [([2, *[5] * (n - 2), 3], [0] * n) for _ in range(2)]

    encoded = [question(3 if i % 2 == 0 else 9) for i in range(8)]
    scores = predict(Recorder(), encoded, 2, 0, collate_fn=choice_collate)
    assert sorted(widths) == [3, 3, 9, 9]
    assert scores.shape == (8, 2)
    assert [s[0] for s in scores] == [sum([2, *[5] * (n - 2), 3]) for n in (3 if i % 2 == 0 else 9 for i in range(8))]


def test_a_batch_is_bounded_by_rows_and_by_padded_tokens():
    """Runs of examples sorted by width: at most max_rows each, and rows x the run's widest at most
    max_tokens, so one long example does not pad 31 short ones to its width."""
    assert length_batches([3] * 5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    short_and_long = [10] * 31 + [512]
    assert length_batches(short_and_long, 32) == [slice(0, 32)]  # rows alone: 32 x 512 tokens
    assert length_batches(short_and_long, 32, 4096) == [slice(0, 31), slice(31, 32)]
    assert length_batches([600, 700], 32, 512) == [slice(0, 1), slice(1, 2)]  # each over it: alone
    assert length_batches([], 8, 64) == []
    rng = np.random.default_rng(0)
    tokens = sorted(rng.integers(1, 300, 500).tolist())
    runs = length_batches(tokens, 16, 1024)
    assert [i for run in runs for i in range(run.start, run.stop)] == list(range(500))  # each once, in order
    for run in runs:
        assert 1 <= run.stop - run.start <= 16 and (run.stop - run.start) * tokens[run.stop - 1] <= 1024
    for before, after in zip(runs, runs[1:]):  # a run ends only where the next example would break a bound
        grown = after.start + 1 - before.start
        assert grown > 16 or grown * tokens[after.start] > 1024


def test_a_question_occupies_its_choices_times_its_width():
    question = [([2, 5, 3], [0, 0, 0]), ([2, 5, 6, 6, 6, 3], [0] * 6), ([2, 3], [0, 0])]
    assert example_tokens(question) == 18 and example_tokens(([2, 7, 3], [0, 0, 0])) == 3


def test_predict_under_a_token_budget_runs_the_short_examples_apart_from_the_long_one():
    shapes = []

    class Recorder(torch.nn.Module):
        def forward(self, input_ids, **_):
            shapes.append(tuple(input_ids.shape))
            return input_ids.float().sum(-1, keepdim=True)

    encoded = [([2, *[5] * (n - 2), 3], [0] * n) for n in [4, 4, 50, 4, 4, 4, 4, 4]]
    unbounded = predict(Recorder(), encoded, 8, 0)
    assert shapes == [(8, 50)]
    shapes.clear()
    bounded = predict(Recorder(), encoded, 8, 0, max_tokens=64)
    assert shapes == [(7, 4), (1, 50)]
    np.testing.assert_array_equal(bounded, unbounded)
