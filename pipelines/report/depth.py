"""The report's section on ALBERT's depth: the distilled student beside its teacher on the same eval
rows (distill/best.json), and how deep the rows predict exited at went (predict's manifest:
`exit_depths`), where the run has them."""

from __future__ import annotations

from typing import Any

from .markdown import fmt, table

BAR = 40
"""Characters of the exit-depth histogram's longest bar."""


def depth_section(distilled: dict[str, Any] | None, predicted: dict[str, Any] | None) -> str:
    """`distilled`: distill/best.json; `predicted`: predict's manifest. Empty where neither says anything."""
    parts = []
    if distilled:
        metric, teacher = distilled["metric"], distilled["teacher"]
        value, base = distilled["value"], teacher["metrics"].get(distilled["metric"])
        rows = [
            ["teacher", teacher["num_hidden_layers"], base, "", teacher["model"]],
            [
                "student",
                distilled["student_layers"],
                value,
                None if base is None else value - base,
                f"trial {distilled['trial_id']}, epoch {distilled['epoch']}",
            ],
        ]
        repeats = distilled.get("repeats")
        if repeats:
            spread = f"{fmt(repeats['mean'])} ± {fmt(repeats['std'])} over {len(repeats['runs'])} seeds"
            loss = None if base is None else repeats["mean"] - base
            rows.append(["student (seeds)", distilled["student_layers"], repeats["mean"], loss, spread])
        parts.append(
            f"Depth distillation: the student applies the teacher's shared layer {distilled['student_layers']} "
            f"times instead of {teacher['num_hidden_layers']} (its compute per row about in proportion), "
            f"scored on the same eval rows.\n\n" + table(["model", "layers", metric, "vs teacher", "note"], rows)
        )
    depths = (predicted or {}).get("exit_depths")
    if depths:
        total, most = sum(depths.values()), max(depths.values())
        rows = [[d, n, n / total, "#" * max(1, round(BAR * n / most))] for d, n in depths.items()]
        mean = sum(int(d) * n for d, n in depths.items()) / total
        rule = ", ".join(f"predict.exit_{k}={v}" for k, v in predicted.get("exit_rule", {}).items() if v is not None)
        parts.append(
            f"Early exit: predict answered {total:,} rows at a mean depth of {mean:.2f} ({rule}).\n\n"
            + table(["exit depth", "rows", "share", ""], rows)
        )
    return "## Depth: distillation and early exit\n\n" + "\n\n".join(parts) if parts else ""


__all__ = ["depth_section"]
