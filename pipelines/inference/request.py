"""A serve request's rows, checked before any reaches the model: one object holding a row's fields
(its family's FamilyInference `fields`) or `{"inputs": [...]}` of up to MAX_INPUTS of them. A
malformed body is BadInput naming the field: its JSON (not JSON, nested too deep, not an object), an
unknown field, text that is not UTF-8, or the family's check_row's reason, said of the field it
concerns."""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from ..config.predicting import POOLINGS
from ..errors import BadInput
from ..finetuning.inference import FamilyInference
from .reading import is_utf8

MAX_INPUTS = 256
"""The most rows one request may carry (`{"inputs": [...]}`)."""
MAX_JSON_DEPTH = 32
"""The deepest nesting of JSON arrays and objects in a body (a request nests 3 or 4 deep); deeper is
refused before json.loads, whose recursion a deep enough body would exhaust."""

JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
NESTING = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_type(value: Any) -> str:
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array"}
    return "null" if value is None else names.get(type(value), "an object")


def nested_deeper(body: bytes, depth: int) -> bool:
    """Whether `body`'s arrays and objects nest deeper than `depth`, brackets inside strings not
    counted, found without parsing it (a scan that cannot recurse)."""
    brackets = JSON_STRING.sub(b"", body).translate(None, NOT_BRACKETS)
    return any(level > depth for level in accumulate(NESTING[b] for b in brackets))


def concerned_field(inference: FamilyInference, row: dict[str, Any], reason: str) -> str | None:
    """The field check_row's `reason` is about: the one the reason ends with (`missing_text`,
    `empty_text_pair`); else the first whose value, with those before it, fails the check for a
    reason other than a field not yet given (so the family's checks run in its fields' order)."""
    named = [f for f in inference.fields if reason.endswith(f"_{f}")]
    if named:
        return max(named, key=len)
    given: dict[str, Any] = {}
    for field in (f for f in inference.fields if f in row):
        given[field] = row[field]
        found = inference.check_row(given)
        if found is not None and not any(found == f"missing_{f}" for f in inference.fields if f not in given):
            return field
    return None


def explained(reason: str, field: str, row: dict[str, Any]) -> str:
    """A reason about `field` said to the caller: `missing_<field>`, `empty_<field>` and `not_a_*` in
    words, others as they are."""
    value = row.get(field)
    if reason == f"missing_{field}":
        return "missing (null)" if field in row else "missing"
    if reason == f"empty_{field}":
        return "empty"
    if reason.startswith("not_a_"):
        return f"{reason[4:].replace('_', ' ')} is expected, got {json_type(value)}"
    return reason


def parse_row(item: Any, prefix: str, inference: FamilyInference) -> dict[str, Any]:
    """One row object; errors name the field under `prefix` ("inputs[3]." or "")."""
    fields = inference.fields
    if not isinstance(item, dict):
        raise BadInput(
            f'{prefix.rstrip(".") or "body"}: an object {{"{fields[0]}": ...}} is expected, got {json_type(item)}'
        )
    unknown = sorted(set(item) - set(fields))
    if unknown:
        raise BadInput(f"{prefix}{unknown[0]}: unknown field (the fields are {', '.join(fields)})")
    for field in fields:
        if field in item and not is_utf8(item[field]):
            raise BadInput(f"{prefix}{field}: not UTF-8 (a lone surrogate escape)")
    reason = inference.check_row(item)
    if reason is not None:
        field = concerned_field(inference, item, reason)
        if field is None:
            raise BadInput(f"{prefix.rstrip('.') or 'body'}: {reason}")
        raise BadInput(f"{prefix}{field}: {explained(reason, field, item)}")
    return item


def parse_body(body: bytes, inference: FamilyInference) -> dict[str, Any]:
    """A request body's JSON object (not yet its rows); BadInput where it is not one."""
    if nested_deeper(body, MAX_JSON_DEPTH):
        raise BadInput(f"body: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        request = json.loads(body)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both are
        raise BadInput(f"body: not JSON ({e})") from None
    if not isinstance(request, dict):
        first = inference.fields[0]
        raise BadInput(
            f'body: an object {{"{first}": ...}} or {{"inputs": [...]}} is expected, got {json_type(request)}'
        )
    return request


def request_rows(request: dict[str, Any], inference: FamilyInference) -> tuple[list[dict[str, Any]], bool]:
    """A request object's rows, and whether it was a list (`{"inputs": [...]}`); BadInput naming the field."""
    if "inputs" not in request:
        return [parse_row(request, "", inference)], False
    beside = sorted(set(request) - {"inputs"})
    if beside:
        raise BadInput(f"{beside[0]}: unknown field beside inputs")
    inputs = request["inputs"]
    if not isinstance(inputs, list) or not inputs:
        got = "an empty array" if isinstance(inputs, list) else json_type(inputs)
        raise BadInput(f"inputs: a non-empty array of row objects is expected, got {got}")
    if len(inputs) > MAX_INPUTS:
        raise BadInput(f"inputs: {len(inputs)} items, over the limit of {MAX_INPUTS} per request")
    return [parse_row(item, f"inputs[{i}].", inference) for i, item in enumerate(inputs)], True


def parse_request(body: bytes, inference: FamilyInference) -> tuple[list[dict[str, Any]], bool]:
    """A request body's rows, and whether it was a list (`{"inputs": [...]}`); a malformed body is
    BadInput naming the field."""
    return request_rows(parse_body(body, inference), inference)


def parse_embed_request(body: bytes, inference: FamilyInference) -> tuple[list[dict[str, Any]], bool, str, bool]:
    """An embedding request's rows (as parse_request's), whether it was a list, and its `pooling`
    (one of POOLINGS; mean where absent) and `normalize` (a boolean; false where absent), which sit
    beside the row's fields or beside `inputs`."""
    request = parse_body(body, inference)
    pooling, normalize = request.pop("pooling", POOLINGS[0]), request.pop("normalize", False)
    if pooling not in POOLINGS:
        raise BadInput(f"pooling: one of {', '.join(POOLINGS)} is expected, got {json.dumps(pooling)[:50]}")
    if not isinstance(normalize, bool):
        raise BadInput(f"normalize: a boolean is expected, got {json_type(normalize)}")
    rows, listed = request_rows(request, inference)
    return rows, listed, pooling, normalize


__all__ = [
    "MAX_INPUTS",
    "MAX_JSON_DEPTH",
    "json_type",
    "nested_deeper",
    "parse_body",
    "parse_embed_request",
    "parse_request",
    "request_rows",
]
