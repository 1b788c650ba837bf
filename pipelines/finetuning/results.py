"""Fine-tuning results, free of Ray: each trial's best kept epoch, a row per trial, the best trial,
and what the stage writes about them (trials.csv, best.json, the summary table).

The Ray edge (pipelines/stages/tune_search.py) hands in the search's journal (search_journal.py:
each trial's settings, epochs and end) and a function that turns a checkpoint path of the search's
storage into a checkpoint, or None once it was deleted.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable
from typing import Any

from ..config import Config, config_to_dict
from ..config.glue import glue_preset
from ..storage import join
from .families import tune_metrics
from .family import Baseline
from .search_journal import TrialRecord
from .trial import trial_finetune

SUMMARY_METRICS = (
    *tune_metrics(),  # every family's tune.metric choices
    *("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "null_threshold"),
    *("eval_loss", "train_loss"),
)
CheckpointAt = Callable[[str], Any]
"""A checkpoint's path relative to the search's storage -> its checkpoint, or None when it no
longer exists."""


def kept_epochs(record: TrialRecord, checkpoint_at: CheckpointAt) -> list[tuple[dict[str, Any], Any]]:
    """A trial's epochs whose checkpoints still exist, with their metrics. num_to_keep=1 keeps, of
    each Ray Tune or Ray Train run of the trial, the best-scoring one (the later on ties) and the
    latest, so this is not always the best row of the trial's epochs: a tie broken there by
    eval_loss can point at a deleted checkpoint."""
    kept = []
    for epoch in record.epochs:
        if epoch["checkpoint"] is not None and (checkpoint := checkpoint_at(epoch["checkpoint"])) is not None:
            kept.append((epoch["metrics"], checkpoint))
    return kept


def best_kept_epoch(
    record: TrialRecord, metric: str, checkpoint_at: CheckpointAt
) -> tuple[dict[str, Any], Any] | tuple[None, None]:
    """The trial's best epoch (highest metric, then lowest eval_loss) among those with a checkpoint."""
    kept = [(m, c) for m, c in kept_epochs(record, checkpoint_at) if metric in m]
    if not kept:
        return None, None
    return max(kept, key=lambda mc: (mc[0][metric], -mc[0].get("eval_loss", 0.0)))


def summarize_trials(
    trials: dict[str, TrialRecord], config: Config, metric: str, checkpoint_at: CheckpointAt
) -> list[dict[str, Any]]:
    """One row per trial: its hyperparameters, how it ended, and its best epoch's metrics (plus,
    under `_checkpoint` and `_finetune`, that epoch's checkpoint and the trial's settings)."""
    rows = []
    for trial_id, record in trials.items():
        cfg = trial_finetune(config.finetune, record.config)
        best, checkpoint = best_kept_epoch(record, metric, checkpoint_at)
        epochs_run = int(record.epochs[-1]["metrics"].get("epoch", 0)) if record.epochs else 0
        status = "error" if record.error else ("completed" if epochs_run >= cfg.epochs else "stopped_early")
        row: dict[str, Any] = {
            "trial_id": trial_id,
            "status": status,
            "stopped_early": status == "stopped_early",
            "epochs_run": epochs_run,
            **{key: getattr(cfg, key.partition(".")[2]) for key in config.tune.space},
            "best_epoch": int(best["epoch"]) if best else None,
        }
        for name in SUMMARY_METRICS:
            if best and name in best:
                row[name] = float(best[name])
        row["seconds"] = float(sum(record.seconds.values()))
        row["error"] = record.error
        row["_checkpoint"], row["_finetune"] = checkpoint, cfg
        row["_epochs"] = [dict(epoch["metrics"]) for epoch in record.epochs]
        rows.append(row)
    return rows


def pick_best(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    """The best trial: highest metric at its best epoch, ties to the lower eval loss."""
    scored = [r for r in rows if metric in r]
    if not scored:
        errors = [r["error"] for r in rows if r["error"]]
        if errors:
            raise RuntimeError("every fine-tuning trial failed: " + "; ".join(errors))
        raise RuntimeError(f"no fine-tuning trial reported the metric {metric!r}")
    return max(scored, key=lambda r: (r[metric], -r.get("eval_loss", 0.0)))


def best_json(
    best: dict[str, Any],
    metric: str,
    label_names: list[str] | None,
    eval_examples: int,
    searched: list[str],
    baseline: Baseline,
) -> dict:
    """best.json: the best trial's best epoch and its metrics, the trial's settings and those of them
    the search chose (`searched`: tune.space's keys), each of its epochs' metrics (its curve), and
    what the family's trivial predictor scores on the same eval examples (`baseline`)."""
    return {
        "trial_id": best["trial_id"],
        "epoch": best["best_epoch"],
        "metric": metric,
        "value": best[metric],
        "metrics": {k: best[k] for k in SUMMARY_METRICS if k in best},
        "searched": {key: best[key] for key in searched},
        "epochs": [
            {"epoch": int(epoch["epoch"]), **{k: v for k, v in epoch.items() if k in SUMMARY_METRICS}}
            for epoch in best["_epochs"]
        ],
        "baseline": {"predictor": baseline.predictor, "metrics": baseline.metrics},
        "finetune": config_to_dict(best["_finetune"]),
        "label_names": label_names,
        "eval_examples": eval_examples,
    }


def trial_counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {
        "total": len(rows),
        "completed": sum(r["status"] == "completed" for r in rows),
        "stopped_early": sum(r["stopped_early"] for r in rows),
        "failed": sum(r["status"] == "error" for r in rows),
    }


def trials_csv(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for row in rows for k in row if not k.startswith("_")))
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def summary_text(rows: list[dict[str, Any]], best: dict[str, Any], metric: str, out_dir: str) -> str:
    """The table printed at the end of the search."""
    keys = [k for k in rows[0] if k.startswith("finetune.")]
    lines = [
        f"fine-tuning: {len(rows)} trials, {sum(r['stopped_early'] for r in rows)} stopped early by the "
        f"scheduler, {sum(r['status'] == 'error' for r in rows)} failed; metric {metric} (eval)"
    ]
    for r in sorted(rows, key=lambda r: -r.get(metric, -math.inf)):
        params = " ".join(
            f"{k.partition('.')[2]}={r[k]:g}" if isinstance(r[k], float) else f"{k.partition('.')[2]}={r[k]}"
            for k in keys
        )
        score = f"{r[metric]:.4f}" if metric in r else "-"
        lines.append(
            f"  {'*' if r is best else ' '} {r['trial_id']:>14} {r['status']:<13} epochs {r['epochs_run']:>2}"
            f"  {metric} {score}  {params}"
        )
    lines.append(
        f"best: trial {best['trial_id']} epoch {best['best_epoch']}: {metric} {best[metric]:.4f}; "
        f"exported to {join(out_dir, 'best')}"
    )
    return "\n".join(lines)


def suite_rows(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluation suite's table: a row per task (report.md shows it)."""
    rows = []
    for name, fields in summary.items():
        preset = glue_preset(name)
        row = {
            "task": name,
            "family": fields["task"],
            "metric": fields["metric"],
            "best": fields["best"]["value"],
            "trials": fields["trials"]["total"],
        }
        if "repeats" in fields:
            row["mean"], row["std"], row["seeds"] = (
                fields["repeats"]["mean"],
                fields["repeats"]["std"],
                len(fields["repeats"]["runs"]),
            )
        if "random_arm" in fields:
            row["random_init"] = fields["random_arm"]["best"]["value"]
        metrics, also = fields.get("best_metrics") or {}, []
        for other in preset.also if preset else ():
            if other in metrics:
                also.append(f"{other} {metrics[other]:.4f}")
        for evaluated, values in (fields.get("extra_evals") or {}).items():
            if fields["metric"] in values:
                also.append(f"{evaluated} {fields['metric']} {values[fields['metric']]:.4f}")
        row["also"] = "; ".join(also)
        rows.append(row)
    return rows


__all__ = [
    "SUMMARY_METRICS",
    "best_json",
    "best_kept_epoch",
    "kept_epochs",
    "pick_best",
    "summarize_trials",
    "suite_rows",
    "summary_text",
    "trial_counts",
    "trials_csv",
]
