"""The report's fine-tuning section: the best result and what it means beside it (the family's
trivial predictor on the same eval examples, the random-start arm when it ran), the best trial's own
hyperparameters and curve, per-class scores and the confusion matrix counted from the predictions
file, the settings that apply to the task, and every trial."""

from __future__ import annotations

from collections import Counter
from typing import Any

from .markdown import fmt, not_run, table

MAX_TRIAL_ROWS = 50
CURVE_PNG = "finetune_curve.png"
CONFUSION_PNG = "confusion_matrix.png"


def per_class(lines: list[dict[str, Any]], names: list[str]) -> list[list[Any]]:
    """[class, precision, recall, f1, support] per class of predictions.jsonl's lines (`prediction`
    and gold `label`: a class, or a list of classes for multi-label), then the macro average."""
    counted = {name: Counter() for name in names}
    for line in lines:
        gold, predicted = (set(v) if isinstance(v, list) else {v} for v in (line["label"], line["prediction"]))
        for name in names:
            counted[name]["tp"] += name in gold and name in predicted
            counted[name]["fp"] += name not in gold and name in predicted
            counted[name]["fn"] += name in gold and name not in predicted
    rows = []
    for name in names:
        c = counted[name]
        precision = c["tp"] / (c["tp"] + c["fp"]) if c["tp"] + c["fp"] else 0.0
        recall = c["tp"] / (c["tp"] + c["fn"]) if c["tp"] + c["fn"] else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        rows.append([name, precision, recall, f1, c["tp"] + c["fn"]])
    if rows:
        macro = [sum(r[i] for r in rows) / len(rows) for i in (1, 2, 3)]
        rows.append(["macro average", *macro, sum(r[4] for r in rows)])
    return rows


def confusion(lines: list[dict[str, Any]], names: list[str]) -> list[list[int]]:
    """counts[gold][predicted] over the classes (one class per example)."""
    index = {name: i for i, name in enumerate(names)}
    counts = [[0] * len(names) for _ in names]
    for line in lines:
        counts[index[line["label"]]][index[line["prediction"]]] += 1
    return counts


def single_class(lines: list[dict[str, Any]], names: list[str] | None) -> bool:
    """Whether the predictions are one class of `names` per example (a confusion matrix applies)."""
    return bool(lines and names) and all(line.get("label") in names and line["prediction"] in names for line in lines)


def classes(lines: list[dict[str, Any]], names: list[str] | None) -> bool:
    """Whether the predictions are classes of `names` with their gold labels (per-class scores apply)."""
    if not lines or not names or any("label" not in line for line in lines):
        return False
    values = [v for line in lines for key in ("label", "prediction") for v in _as_list(line[key])]
    return all(isinstance(v, str) and v in names for v in values)


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def finetune_section(
    manifest: dict | None,
    trials: list[dict[str, str]],
    best: dict | None,
    predictions: list[dict[str, Any]],
    applies: list[str],
    figures: dict[str, str],
) -> str:
    """`applies`: the finetune keys that change this task's result (the others are left out);
    `figures`: the curve's and the confusion matrix's file names, where drawn."""
    parts = ["## Fine-tuning search"]
    if manifest is None:
        return "\n\n".join(parts + [not_run("finetune")])
    if best:
        parts += _best(manifest, best)
        parts += _classes(best, predictions, figures.get(CONFUSION_PNG))
        parts += _curve(best, figures.get(CURVE_PNG))
        shown = {k: v for k, v in (best.get("finetune") or {}).items() if k in applies and k not in _searched(best)}
        parts.append(
            "The task's other settings (the keys that change this task's result; the ones only other tasks "
            "read are left out):\n\n" + table(["key", "value"], [[f"finetune.{k}", v] for k, v in shown.items()])
        )
    if trials:
        headers = list(trials[0])
        rows = trials[:MAX_TRIAL_ROWS]
        more = f"\n\n({len(trials) - len(rows)} more trials in finetune/trials.csv)" if len(trials) > len(rows) else ""
        parts.append(f"{len(trials)} trials:\n\n" + table(headers, [[t.get(h) for h in headers] for t in rows]) + more)
    return "\n\n".join(parts)


def _searched(best: dict) -> dict[str, Any]:
    return {key.partition(".")[2]: value for key, value in (best.get("searched") or {}).items()}


def _best(manifest: dict, best: dict) -> list[str]:
    metric, task = best["metric"], (best.get("finetune") or {}).get("task", manifest.get("task"))
    parts = [
        f"Best: **{metric} {fmt(best['value'])}**, trial `{best['trial_id']}` at epoch {best['epoch']}, on "
        f"{best.get('eval_examples', '?')} eval examples of the `{task}` task. What that number means, "
        "beside what a model that learnt nothing and one that was not pretrained score on the same examples:"
    ]
    names = [m for m in best.get("metrics", {}) if m not in ("eval_loss", "train_loss")]
    rows = [["this model (the best trial)", *[best["metrics"].get(m) for m in names]]]
    baseline = best.get("baseline")
    if baseline:
        rows.append([f"trivial: {baseline['predictor']}", *[baseline["metrics"].get(m) for m in names]])
    random_arm = manifest.get("random_arm")
    if random_arm:
        rows.append(["random start (finetune.compare_random)", *[random_arm["best_metrics"].get(m) for m in names]])
    parts.append(table(["", *names], rows))
    searched = best.get("searched") or {}
    if searched:
        parts.append(
            "The best trial's hyperparameters, chosen by the search (tune.space): the configuration below "
            "shows the values they replace.\n\n" + table(["key", "value"], [[k, v] for k, v in searched.items()])
        )
    return parts


def _classes(best: dict, predictions: list[dict[str, Any]], figure: str | None) -> list[str]:
    names = best.get("label_names")
    if not classes(predictions, names):
        return []
    parts = [
        "Per class, counted from finetune/predictions.jsonl (the best trial's eval predictions):\n\n"
        + table(["class", "precision", "recall", "f1", "support"], per_class(predictions, names))
    ]
    if single_class(predictions, names):
        counts = confusion(predictions, names)
        image = f"![Confusion matrix]({figure})\n\n" if figure else ""
        parts.append(
            f"Confusion matrix (rows: the gold class, columns: the predicted one):\n\n{image}"
            + table(["gold \\ predicted", *names], [[name, *row] for name, row in zip(names, counts)])
        )
    return parts


def _curve(best: dict, figure: str | None) -> list[str]:
    epochs = best.get("epochs") or []
    if not epochs:
        return []
    keys = [best["metric"], *(k for k in epochs[0] if k not in ("epoch", best["metric"]))]
    image = f"![The best trial's curve]({figure})\n\n" if figure else ""
    return [
        f"The best trial's epochs ({best['metric']} on the eval examples after each):\n\n{image}"
        + table(["epoch", *keys], [[e.get("epoch"), *[e.get(k) for k in keys]] for e in epochs])
    ]


__all__ = ["CONFUSION_PNG", "CURVE_PNG", "confusion", "finetune_section", "per_class", "single_class"]
