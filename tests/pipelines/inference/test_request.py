"""A serve request's rows are checked before any reaches the model, by the model's family: a row holds
the family's fields, and a malformed one is refused naming the field it concerns (the reason the
family's check_row gives, said in words where it is a missing, empty or mistyped value)."""

import json

import pytest

from pipelines.errors import BadInput
from pipelines.finetuning.families.classification.inference import INFERENCE as CLASSIFIER
from pipelines.finetuning.families.multiple_choice.inference import INFERENCE as CHOICE
from pipelines.inference.request import parse_request


def refused(body: bytes | dict, inference=CLASSIFIER) -> str:
    with pytest.raises(BadInput) as raised:
        parse_request(body if isinstance(body, bytes) else json.dumps(body).encode(), inference)
    return str(raised.value)


def test_a_text_or_pair_request_and_its_checks_name_the_field():
    assert parse_request(b'{"text": "a", "text_pair": "b"}', CLASSIFIER) == ([{"text": "a", "text_pair": "b"}], False)
    assert parse_request(b'{"inputs": [{"text": "a"}, {"text": "b", "text_pair": null}]}', CLASSIFIER) == (
        [{"text": "a"}, {"text": "b", "text_pair": None}],
        True,
    )
    assert parse_request(json.dumps({"text": '\\"[{' * 100}).encode(), CLASSIFIER) == (
        [{"text": '\\"[{' * 100}],
        False,
    )
    for body, message in [
        (b"\xff", "body: not JSON"),
        (b"[" * 100_000, "body: JSON nested deeper than 32 levels"),
        (b'{"text": "a", "x": ' + b"{" * 33, "body: JSON nested deeper than 32 levels"),
        (b"[1, 2]", 'body: an object {"text": ...} or {"inputs": [...]} is expected, got an array'),
        (b'{"inputs": [{"text": "a"}], "text": "b"}', "text: unknown field beside inputs"),
        (b'{"inputs": []}', "inputs: a non-empty array of row objects is expected, got an empty array"),
        (b'{"inputs": ["a"]}', 'inputs[0]: an object {"text": ...} is expected, got a string'),
        (b'{"text": true}', "text: a string is expected, got a boolean"),
        (b'{"text": "a\\udc80"}', "text: not UTF-8 (a lone surrogate escape)"),
        ({}, "text: missing"),
        ({"txt": "typo"}, "txt: unknown field (the fields are text, text_pair)"),
        ({"text": " "}, "text: empty"),
        ({"text": "ok", "text_pair": ""}, "text_pair: empty"),
        ({"text": "ok", "text_pair": ["no"]}, "text_pair: a string is expected, got an array"),
        ({"inputs": [{"text": "ok"}, {"text": None}]}, "inputs[1].text: missing (null)"),
        ({"inputs": [{"text": "ok"}] * 257}, "inputs: 257 items, over the limit of 256 per request"),
    ]:
        assert refused(body).startswith(message), (body, refused(body))


def test_a_multiple_choice_request_names_the_field_each_reason_concerns():
    row = {"question": "The dog", "context": "On a farm.", "choices": ["barks", "meows"]}
    assert parse_request(json.dumps({"inputs": [row, {"question": "Q", "choices": ["a", "b", "c"]}]}).encode(), CHOICE)[
        0
    ] == [row, {"question": "Q", "choices": ["a", "b", "c"]}]
    cases = [
        ({**row, "question": 3}, "question: a string is expected, got a number"),
        ({**row, "context": ["x"]}, "context: a string is expected, got an array"),
        ({"question": "Q"}, "choices: missing"),
        ({**row, "choices": "barks"}, "choices: a list of strings is expected, got a string"),
        ({**row, "choices": ["barks", 1]}, "choices: a list of strings is expected, got an array"),
        ({**row, "choices": ["barks"]}, "choices: too_few_choices"),
        ({**row, "choices": ["barks", " "]}, "choices: empty_choice"),
        ({"question": " ", "choices": ["a", "b"]}, "question: empty"),
        ({**row, "answer": 1}, "answer: unknown field (the fields are question, context, choices)"),
    ]
    for body, message in cases:
        assert refused(body, CHOICE) == message


def test_an_embedding_request_carries_its_pooling_and_normalisation_beside_the_rows():
    from pipelines.inference.embedding import EMBEDDING_ROWS
    from pipelines.inference.request import parse_embed_request

    assert parse_embed_request(b'{"text": "a"}', EMBEDDING_ROWS) == ([{"text": "a"}], False, "mean", False)
    body = b'{"inputs": [{"text": "a", "text_pair": "b"}], "pooling": "cls", "normalize": true}'
    assert parse_embed_request(body, EMBEDDING_ROWS) == ([{"text": "a", "text_pair": "b"}], True, "cls", True)
    refused = {
        b'{"text": "a", "pooling": "max"}': 'pooling: one of mean, cls is expected, got "max"',
        b'{"text": "a", "normalize": "yes"}': "normalize: a boolean is expected, got a string",
        b'{"inputs": [{"text": "a", "pooling": "cls"}]}': "inputs[0].pooling: unknown field (the fields are text, "
        "text_pair)",
        b'{"inputs": [], "pooling": "cls"}': "inputs: a non-empty array of row objects is expected, got an empty array",
        b'{"text": 3}': "text: a string is expected, got a number",
    }
    for body, message in refused.items():
        with pytest.raises(BadInput) as e:
            parse_embed_request(body, EMBEDDING_ROWS)
        assert str(e.value) == message
