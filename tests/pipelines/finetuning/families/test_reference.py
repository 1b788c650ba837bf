"""docs/finetuning.md's table of the task families is the one pipelines/finetuning/families/reference.py
makes from the registry: it fails when a family is added or changed without pasting the table again."""

import subprocess
import sys
from pathlib import Path

from pipelines.config import FinetuneSection, TuneSection, field_docs
from pipelines.finetuning.families import FAMILIES
from pipelines.finetuning.families.reference import COMMAND, families_table

ROOT = Path(__file__).resolve().parents[4]


def test_docs_finetuning_md_holds_the_generated_table():
    assert families_table() in (ROOT / "docs" / "finetuning.md").read_text(), f"stale: paste `{COMMAND}`'s output"


def test_the_table_has_a_row_per_family_with_its_head_and_metrics():
    rows = [line for line in families_table().splitlines() if line.startswith("| `") and "finetune.task" not in line]
    assert [row.split("`")[1] for row in rows] == list(FAMILIES)
    for row, family in zip(rows, FAMILIES.values()):
        assert f"`{family.architecture}`" in row and f"`{family.metrics[0]}`" in row.split(" | ")[2]
    out = subprocess.run(
        [sys.executable, "-m", "pipelines.finetuning.families.reference"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == families_table()


def test_the_config_keys_docs_name_every_family_and_its_metrics():
    """finetune.task's and tune.metric's docs (--help, docs/config.md) list the choices in prose: the
    config layer lies below the registry, so this holds them to it."""
    task, metric = field_docs(FinetuneSection)["task"], field_docs(TuneSection)["metric"]
    for family in FAMILIES.values():
        assert family.name in task and family.name in metric, family.name
        assert all(m in metric for m in family.metrics), family.name
