"""The distillation trade-off benchmark runs end to end on a few BBC rows: every arm (teacher,
students of two seeds, early exit) scored on the same eval rows and timed; the figures are recorded
in docs/BENCHMARKS.md, never asserted."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "distill_tradeoff.py"


def test_distill_tradeoff_bench_scores_and_times_every_arm(tmp_path):
    out = tmp_path / "tradeoff.json"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--smoke", "--threads", "1", "--out", str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = json.loads(out.read_text())
    assert set(summary["arms"]) == {"teacher", "student seed 0", "student seed 1", "exit patience 1"}
    assert summary["teacher"]["num_hidden_layers"] == 4 and summary["students"]["num_hidden_layers"] == 2
    assert all(0 <= arm["accuracy"] <= 1 and arm["rows_per_s"] > 0 for arm in summary["arms"].values())
    exits = summary["arms"]["exit patience 1"]["exit_depths"]
    # patience 1: a row exits at depth 2 at the earliest
    assert sum(exits.values()) == summary["eval_rows"] and set(exits) <= {"2", "3", "4"}
