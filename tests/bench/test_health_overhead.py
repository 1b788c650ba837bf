"""The training-health overhead benchmark runs end to end: both arms timed, and the check leaves the
parameters identical (its own assertion); the times are recorded in docs/BENCHMARKS.md, never asserted."""

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "health_overhead.py"


def test_health_overhead_bench_times_both_arms():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "8", "--rounds", "1", "--threads", "1"],
        check=True,
        capture_output=True,
        text=True,
        timeout=240,
    ).stdout
    rows = {line.split("|")[1].strip(): line.split("|")[3].strip() for line in out.splitlines()[2:4]}
    assert rows == {"off": "3", "on": "3"}, out
    assert "parameters identical in every round" in out
