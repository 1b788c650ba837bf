"""The report's section on ALBERT's depth: the distilled student beside its teacher on the same eval
rows (distill/best.json), what each way of answering costs and scores (the distill stage's
trade-off: teacher, student, early exit; a table and a figure), and how deep the rows predict
exited at went (predict's manifest: `exit_depths`), where the run has them."""

from __future__ import annotations

from typing import Any

from .markdown import fmt, table

BAR = 40
"""Characters of the exit-depth histogram's longest bar."""
TRADEOFF_PNG = "depth_tradeoff.png"


def tradeoff_part(tradeoff: dict[str, Any], metric: str, figure: str | None) -> str:
    """The trade-off table (each arm's depth, metric and eval rows/s beside the teacher's) and its figure."""
    arms = tradeoff["arms"]
    teacher = next(a for a in arms if a["name"] == "teacher")
    base, speed = teacher["metrics"].get(metric), teacher["rows_per_s"]
    rows = []
    for arm in arms:
        value = arm["metrics"].get(metric)
        loss = None if arm is teacher or value is None or base is None else value - base
        ratio = f"{arm['rows_per_s'] / speed:.2f}x" if arm["rows_per_s"] and speed else ""
        rows.append([arm["name"], arm["layers"], arm["mean_depth"], value, loss, arm["rows_per_s"], ratio])
    text = (
        f"What each way of answering scores and costs, on the same {tradeoff['eval_rows']:,} eval rows: "
        f"rows per second of the model over the tokenized rows (tokenizing, which no depth shortens, "
        f"is left out) on {tradeoff['threads']} CPU thread(s) of the distill stage's process, the fastest "
        f"of a few passes taken in turn.\n\n"
        + table(["answered by", "layers", "mean depth", metric, "vs teacher", "rows/s", "speed-up"], rows)
    )
    return text + (f"\n\n![{metric} against rows per second]({figure})" if figure else "")


def depth_section(
    distilled: dict[str, Any] | None,
    predicted: dict[str, Any] | None,
    tradeoff: dict[str, Any] | None = None,
    figure: str | None = None,
) -> str:
    """`distilled`: distill/best.json; `predicted`: predict's manifest; `tradeoff`: the distill
    stage's (distill/tradeoff.json), drawn as `figure`. Empty where none says anything."""
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
        if tradeoff:
            parts.append(tradeoff_part(tradeoff, metric, figure))
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


__all__ = ["TRADEOFF_PNG", "depth_section", "tradeoff_part"]
