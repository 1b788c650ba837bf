"""The SOP-plateau benchmark runs end to end and prints one row per seed (numbers are recorded in
docs/BENCHMARKS.md, never asserted)."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "sop_plateau.py"


def test_sop_plateau_bench_prints_a_row_per_seed():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--hidden", "32", "--steps", "5", "--seeds", "0,1"],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    ).stdout
    rows = [line.split("|")[1:-1] for line in out.splitlines()[2:]]
    assert [(r[0].strip(), r[4].strip()) for r in rows] == [("32", "0"), ("32", "1")], out
    assert all(0.0 <= float(r[6]) <= 1.0 for r in rows), out
