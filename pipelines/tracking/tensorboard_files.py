"""TensorBoard event files (tensorboardX's writer) in a folder of the run_dir, local or s3://."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from typing import Any

from ..storage import is_remote, join, write_bytes

UPLOAD_EVERY_S = 60.0
"""On s3://, the longest the uploaded event files lag the local ones (and at close)."""


class TensorBoardTracker:
    """Scalars by step, params as a text table. On s3:// the events are written to a local folder and
    the whole folder uploaded (an event file is appended to, and objects cannot be): at most once a
    minute, so a long run does not upload its growing file at every metrics line, and at close."""

    def __init__(self, folder: str, purge_step: int | None = None):
        from tensorboardX import SummaryWriter

        self.folder = folder
        self.local = tempfile.mkdtemp(prefix="tensorboard-") if is_remote(folder) else folder
        # purge_step: a resumed run hides the events its previous attempt wrote from that step on. The
        # file is named by the second and host: the suffix keeps two writers of one second apart, in order.
        suffix = f".{time.time_ns()}"
        self.writer = SummaryWriter(self.local, purge_step=purge_step, flush_secs=30, filename_suffix=suffix)
        self.uploaded = float("-inf")

    def log_params(self, params: Mapping[str, Any]) -> None:
        rows = "".join(f"| {key} | {str(value).replace('|', '/')} |\n" for key, value in sorted(params.items()))
        self.writer.add_text("params", "| param | value |\n|---|---|\n" + rows, 0)
        self._flush()

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self._flush()

    def log_artifacts(self, folder: str, path: str) -> None:
        """TensorBoard keeps no artifacts."""

    def close(self, failed: bool = False) -> None:
        self.writer.close()
        if self.local != self.folder:
            self._upload()
            shutil.rmtree(self.local, ignore_errors=True)

    def _flush(self) -> None:
        self.writer.flush()
        if self.local != self.folder and time.monotonic() - self.uploaded >= UPLOAD_EVERY_S:
            self._upload()

    def _upload(self) -> None:
        self.uploaded = time.monotonic()
        for root, _, names in os.walk(self.local):
            for name in names:
                rel = os.path.relpath(os.path.join(root, name), self.local)
                with open(os.path.join(root, name), "rb") as f:
                    write_bytes(join(self.folder, *rel.split(os.sep)), f.read())


__all__ = ["TensorBoardTracker"]
