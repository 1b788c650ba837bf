"""`predict` orders examples by width before batching (less padding): a sequence's tokens, or a
multiple-choice question's longest choice."""

import numpy as np
import torch

from pipelines.finetuning.families.multiple_choice.training import collate as choice_collate
from pipelines.finetuning.loop import example_width, predict


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
