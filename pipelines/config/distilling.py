"""The `distill` section: a shallower student of the fine-tuned model (albert-ray distill, and the
DAG's distill stage when distill.layers is set)."""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from pydantic.dataclasses import dataclass

from .base import STRICT, Section

HALF = "half"


@dataclass(config=STRICT)
class DistillSection(Section):
    """Depth distillation: the fine-tuned model's shared layer applied fewer times, trained on the
    task's training rows against the fine-tuned model's outputs, searched by Ray Tune as fine-tuning
    is (the finetune and tune sections' settings and space)."""

    SECTION: ClassVar[str] = "distill"

    layers: int | str | None = None
    """Applications of the teacher's shared layer in the student (its num_hidden_layers), fewer than
    the teacher's; `half` for half of them, rounded up. null: no distill stage (the DAG skips it)."""
    teacher: str | None = None
    """The fine-tuned model to distil (an export of any task family); null = {run_dir}/finetune/best."""
    alpha: float = 0.5
    """Share of the task's own (hard-label) loss; the rest is the loss against the teacher's outputs."""
    temperature: float = 2.0
    """Softmax (and sigmoid) temperature of the soft-target loss, which is scaled by its square."""
    hidden_weight: float = 0.0
    """Weight of the hidden states' mean squared error, student step i against teacher step 2i at
    half depth (round(i * teacher / student)); 0: no hidden-state matching (and no teacher in the trials)."""
    exit_patiences: list[int] = field(default_factory=lambda: [1, 2])
    """Early exit's patiences the stage's trade-off measures on the teacher beside the student
    (distill/tradeoff.json, the report's figure); those that cannot exit before the teacher's last
    depth are left out. A sequence family's teacher only."""
    exit_entropies: list[float] = field(default_factory=lambda: [0.2])
    """Early exit's entropy thresholds (nats) the trade-off measures, as exit_patiences."""

    def __post_init__(self) -> None:
        self.require(
            "layers",
            self.layers is None or self.layers == HALF or (isinstance(self.layers, int) and self.layers >= 1),
            f"must be a number of layers >= 1, {HALF}, or null",
        )
        self.require("teacher", self.teacher != "", "must not be empty (use null)")
        self.require("alpha", 0.0 <= self.alpha <= 1.0, "must be in [0, 1]")
        self.require("temperature", self.temperature > 0, "must be > 0")
        self.require("hidden_weight", self.hidden_weight >= 0, "must be >= 0")
        self.require("exit_patiences", all(p >= 1 for p in self.exit_patiences), "must be integers >= 1")
        self.require("exit_entropies", all(e > 0 for e in self.exit_entropies), "must be numbers > 0")

    def student_layers(self, teacher_layers: int) -> int:
        """The student's depth for a teacher of `teacher_layers` (distill.layers set)."""
        return -(-teacher_layers // 2) if self.layers == HALF else int(self.layers)


__all__ = ["HALF", "DistillSection"]
