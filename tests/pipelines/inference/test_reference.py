"""docs/predicting.md's table of each family's input fields and output columns is the one
pipelines/inference/reference.py makes from the registry: it fails when a family's inference changes
without pasting the table again."""

import subprocess
import sys
from pathlib import Path

from pipelines.finetuning.families import FAMILIES
from pipelines.inference.reference import COMMAND, inference_table

ROOT = Path(__file__).resolve().parents[3]


def test_docs_predicting_md_holds_the_generated_table():
    assert inference_table() in (ROOT / "docs" / "predicting.md").read_text(), f"stale: paste `{COMMAND}`'s output"


def test_the_table_has_a_row_per_family_with_its_fields_and_outputs():
    rows = [line for line in inference_table().splitlines() if line.startswith("| `") and "finetune.task" not in line]
    assert [row.split("`")[1] for row in rows] == list(FAMILIES)
    for row, family in zip(rows, FAMILIES.values()):
        if family.inference is not None:
            inference = family.load_inference()
            cells = row.split(" | ")
            assert all(f"**`{f}`**" in cells[1] for f in inference.required)
            assert all(f"`{f}`" in cells[1] for f in inference.fields)
            assert all(f"`{name}` (" in cells[3] for name in inference.output)
    assert "`prediction` (`list<string>`)" in rows[list(FAMILIES).index("multi_label")]
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.inference.reference"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout == inference_table()
