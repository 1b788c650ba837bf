"""What each stage cost: wall time and the CPUs/GPUs Ray reserved for it, measured by the DAG.

The DAG samples the cluster's reserved resources (total minus available) while a stage runs and
integrates them over the stage's wall time. Stages run one after another, so what is reserved
during a stage is that stage's. The record lives in `{run_dir}/costs/<stage>.json` together with
the fingerprint of the output it paid for, so a later report can tell a current record from a
stale one (a stage rerun standalone leaves the old record behind).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from ..storage import join, read_json, write_text
from .ownership import ensure_folder


class ReservationMeter:
    """Integrates `sample()` -> (cpus, gpus) reserved over time in a background thread."""

    def __init__(self, sample: Callable[[], tuple[float, float]], interval_s: float = 1.0):
        self.sample, self.interval_s = sample, interval_s
        self.cpu_seconds = self.gpu_seconds = 0.0
        self.peak_cpus = self.peak_gpus = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="reservation-meter")

    def _run(self) -> None:
        last = time.monotonic()
        while True:
            stopped = self._stop.wait(self.interval_s)
            now = time.monotonic()
            try:
                cpus, gpus = self.sample()
            except Exception:  # a cluster hiccup must not fail the stage it measures
                cpus = gpus = 0.0
            self.cpu_seconds += cpus * (now - last)
            self.gpu_seconds += gpus * (now - last)
            self.peak_cpus, self.peak_gpus = max(self.peak_cpus, cpus), max(self.peak_gpus, gpus)
            last = now
            if stopped:
                return

    def __enter__(self) -> ReservationMeter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def cost_path(run_dir: str, stage: str) -> str:
    return join(run_dir, "costs", f"{stage}.json")


def write_cost(run_dir: str, stage: str, record: dict[str, Any]) -> None:
    """`record`: fingerprint, started (unix s), wall_s, cpu_hours, gpu_hours, peak_cpus, peak_gpus,
    cluster_cpus, cluster_gpus."""
    ensure_folder(join(run_dir, "costs"))
    write_text(cost_path(run_dir, stage), json.dumps(record, indent=2, sort_keys=True) + "\n")


def read_cost(run_dir: str, stage: str) -> dict[str, Any] | None:
    return read_json(cost_path(run_dir, stage))


def cost_record(
    fingerprint: str, started: float, wall_s: float, meter: ReservationMeter, cluster: dict[str, float]
) -> dict[str, Any]:
    return {
        "fingerprint": fingerprint,
        "started": started,
        "wall_s": round(wall_s, 3),
        "cpu_hours": meter.cpu_seconds / 3600,
        "gpu_hours": meter.gpu_seconds / 3600,
        "peak_cpus": meter.peak_cpus,
        "peak_gpus": meter.peak_gpus,
        "cluster_cpus": cluster.get("CPU", 0.0),
        "cluster_gpus": cluster.get("GPU", 0.0),
    }
