"""Every family that declares its inference (pipelines/finetuning/inference.py) has one that loads and
keeps the interface's promises: its required fields are among its fields, its outputs are Arrow
types, and check_row answers any row (missing fields, any JSON value in any field) without raising,
a reason being a short snake_case word."""

import itertools
import re

import pyarrow as pa

from pipelines.finetuning.families import FAMILIES

VALUES = [None, 0, 1.5, True, "", " ", "text", [], ["a"], ["a", "b"], [1, "a"], {"a": 1}]


def test_every_declared_inference_loads_and_checks_any_row_without_raising():
    declared = [f for f in FAMILIES.values() if f.inference is not None]
    assert {"classification", "regression", "multi_label", "multiple_choice"} <= {f.name for f in declared}
    for family in declared:
        inference = family.load_inference()
        assert inference.fields and set(inference.required) <= set(inference.fields), family.name
        assert inference.output and all(isinstance(t, pa.DataType) for t in inference.output.values())
        reasons = set()
        for values in itertools.product([*VALUES, "absent"], repeat=min(len(inference.fields), 3)):
            row = {f: v for f, v in zip(inference.fields, values) if v != "absent"}
            reason = inference.check_row(row)
            assert reason is None or re.fullmatch(r"[a-z]+(_[a-z]+)*", reason), (family.name, row, reason)
            reasons.add(reason)
        assert None in reasons and len(reasons) > 2, (family.name, reasons)
