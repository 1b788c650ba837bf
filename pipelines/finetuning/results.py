"""Fine-tuning results, free of Ray: each trial's best kept epoch, a row per trial, the best trial,
and what the stage writes about them (trials.csv, best.json, the summary table).

The Ray edge (pipelines/stages/finetune.py) hands in Ray Tune's results as they are (their `config`,
`metrics`, `error`, `best_checkpoints` and `metrics_dataframe`) and a function that turns a
checkpoint path of the search's storage into a checkpoint, or None once it was deleted.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterable
from typing import Any

from ..config import TUNE_METRICS, Config, config_to_dict
from ..config.glue import glue_preset
from ..storage import join
from .trial import trial_finetune

SUMMARY_METRICS = (
    *dict.fromkeys(name for names in TUNE_METRICS.values() for name in names),  # every family's tune.metric choices
    *("HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "null_threshold"),
    *("eval_loss", "train_loss"),
)
CheckpointAt = Callable[[str], Any]
"""A path inside the search's storage -> its checkpoint, or None when it no longer exists."""


def kept_epochs(result: Any, checkpoint_at: CheckpointAt, path_key: str) -> list[tuple[dict[str, Any], Any]]:
    """A trial's epochs whose checkpoints still exist, with their metrics. num_to_keep=1 keeps the
    best-scoring one (the later on ties), so this is not always the best row of the metrics table:
    a tie broken there by eval_loss can point at a deleted checkpoint."""
    kept = [(metrics, checkpoint) for checkpoint, metrics in result.best_checkpoints or []]
    if kept or result.metrics_dataframe is None or path_key not in result.metrics_dataframe:
        return kept
    # A Ray Train trial: its rows carry the checkpoint's path inside the storage filesystem (no
    # s3:// scheme), and only the kept checkpoints are still there.
    for row in result.metrics_dataframe.to_dict("records"):
        if isinstance(row.get(path_key), str) and (checkpoint := checkpoint_at(row[path_key])) is not None:
            kept.append((row, checkpoint))
    return kept


def best_kept_epoch(
    result: Any,
    metric: str,
    checkpoint_at: CheckpointAt,
    path_key: str,
) -> tuple[dict[str, Any], Any] | tuple[None, None]:
    """The trial's best epoch (highest metric, then lowest eval_loss) among those with a checkpoint."""
    kept = [(m, c) for m, c in kept_epochs(result, checkpoint_at, path_key) if metric in m]
    if not kept:
        return None, None
    return max(kept, key=lambda mc: (mc[0][metric], -mc[0].get("eval_loss", 0.0)))


def summarize_trials(
    results: Iterable[Any], config: Config, metric: str, checkpoint_at: CheckpointAt, path_key: str
) -> list[dict[str, Any]]:
    """One row per trial: its hyperparameters, how it ended, and its best epoch's metrics (plus,
    under `_checkpoint` and `_finetune`, that epoch's checkpoint and the trial's settings)."""
    rows = []
    for result in results:
        trial_config = {k: v for k, v in (result.config or {}).items() if k.startswith("finetune.")}
        cfg = trial_finetune(config.finetune, trial_config)
        best, checkpoint = best_kept_epoch(result, metric, checkpoint_at, path_key)
        epochs_run = int(result.metrics.get("epoch", 0)) if result.metrics else 0
        status = "error" if result.error else ("completed" if epochs_run >= cfg.epochs else "stopped_early")
        row: dict[str, Any] = {
            "trial_id": (result.metrics or {}).get("trial_id", ""),
            "status": status,
            "stopped_early": status == "stopped_early",
            "epochs_run": epochs_run,
            **{key: getattr(cfg, key.partition(".")[2]) for key in config.tune.space},
            "best_epoch": int(best["epoch"]) if best else None,
        }
        for name in SUMMARY_METRICS:
            if best and name in best:
                row[name] = float(best[name])
        row["seconds"] = float((result.metrics or {}).get("time_total_s", 0.0))
        row["error"] = str(result.error).splitlines()[0] if result.error else ""
        row["_checkpoint"], row["_finetune"] = checkpoint, cfg
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


def best_json(best: dict[str, Any], metric: str, label_names: list[str] | None, eval_examples: int) -> dict:
    return {
        "trial_id": best["trial_id"],
        "epoch": best["best_epoch"],
        "metric": metric,
        "value": best[metric],
        "metrics": {k: best[k] for k in SUMMARY_METRICS if k in best},
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
