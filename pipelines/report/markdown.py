"""report.md, section by section, from the stages' manifests and outputs (pure: data in, text out)."""

from __future__ import annotations

from typing import Any

from ..train.health import HEALTH_EVENTS, describe
from .layers import LayerTransition


def fmt(value: Any) -> str:
    """A table cell: floats to 4 significant digits, large integers with thousands separators."""
    if value is None or value == "":
        return "–"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    if isinstance(value, str):
        try:
            return fmt(int(value)) if value.lstrip("-").isdigit() else fmt(float(value))
        except ValueError:
            return value.replace("|", "\\|")
    return str(value).replace("|", "\\|")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    flat: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def not_run(stage: str) -> str:
    return f"_The {stage} stage has no output in this run yet._"


OBJECTIVES = {
    "sop": "SOP (sentence-order prediction, ALBERT's)",
    "nsp": "NSP (next-sentence prediction, BERT's)",
    "none": "none (masked LM only)",
}
"""data.sentence_objective -> how the report names it."""
LABEL_1_ROWS = {
    "sop": ("swapped (SOP label 1) share", "swapped_share"),
    "nsp": ("B from another document (NSP label 1) share", "random_next_share"),
}


def sentence_objective(data: dict | None, configured: str) -> str:
    """The objective the data was made with (its manifest; one written before the key was sop), else
    the configured one."""
    return data.get("sentence_objective", "sop") if data is not None else configured


def sentence_columns(record: dict, objective: str) -> dict:
    """A metrics record for a table: the sentence objective's figures named after it (nsp_loss,
    nsp_accuracy), left out without one."""
    out = {}
    for key, value in record.items():
        if key.startswith("sop_") and objective == "none":
            continue
        out[key.replace("sop_", "nsp_", 1) if key.startswith("sop_") and objective == "nsp" else key] = value
    return out


def data_section(vocab: dict | None, data: dict | None) -> str:
    parts = ["## Data"]
    if vocab is not None:
        sample = vocab.get("sample", {})
        parts.append(
            f"Vocabulary: {fmt(vocab['vocab_size'])} SentencePiece pieces, trained on "
            f"{fmt(sample.get('sampled_sentences'))} of {fmt(sample.get('sentences'))} sentences."
            if "sampled_sentences" in sample
            else f"Vocabulary: {fmt(vocab['vocab_size'])} pieces, reused from {sample.get('reused')}."
        )
    if data is None:
        return "\n\n".join(parts + [not_run("data")])
    docs, stats = data["documents"], data.get("statistics", {})
    rejected = ", ".join(f"{k} {v:,}" for k, v in sorted(docs["rejected"].items())) or "none"
    parts.append(
        f"{len(data['inputs']):,} input files, {sum(i['bytes'] for i in data['inputs']) / 1e6:.1f} MB; "
        f"{docs['read']:,} documents read, {docs['used']:,} used, rejected: {rejected}."
    )
    splits = list(data["examples"])
    parts.append(
        table(
            ["split", "examples", "tokens", "tokens / example"],
            [
                [s, data["examples"][s], data["tokens"][s], data["tokens"][s] / max(1, data["examples"][s])]
                for s in splits
            ],
        )
    )
    config = data.get("config", {}).get("data", {})
    objective = sentence_objective(data, "sop")
    label_rows = []
    if objective in LABEL_1_ROWS:
        name, key = LABEL_1_ROWS[objective]
        label_rows.append([name, stats.get(key)])
    if "nsp_pool" in data:
        pool = data["nsp_pool"]
        label_rows.append(
            [
                "NSP negatives' pool: train / validation documents",
                f"{fmt(pool['train']['documents'])} / {fmt(pool['validation']['documents'])}",
            ]
        )
    parts.append(
        table(
            ["statistic", "value"],
            [
                ["sentence objective", OBJECTIVES.get(objective, objective)],
                ["max_seq_length", config.get("max_seq_length")],
                ["masking", data["masking"]["mode"]],
                ["masked share of tokens", stats.get("masked_share")],
                [
                    "[MASK] / keep / random replacement shares",
                    " / ".join(fmt(stats.get("replacement_shares", {}).get(k)) for k in ("mask", "keep", "random")),
                ],
                [
                    "n-gram length shares",
                    ", ".join(f"{k}: {fmt(v)}" for k, v in stats.get("ngram_length_shares", {}).items()),
                ],
                *label_rows,
                ["short-sequence share", stats.get("short_share")],
                ["data stage workers / seconds", f"{data.get('num_workers')} / {fmt(data.get('seconds'))}"],
            ],
        )
    )
    return "\n\n".join(parts)


def pretrain_section(
    manifest: dict | None, train: list[dict], final_eval: dict | None, curves: str | None, objective: str = "sop"
) -> str:
    parts = ["## Pretraining"]
    if manifest is None:
        return "\n\n".join(parts + [not_run("pretrain")])
    if objective == "none":
        parts.append(
            "Sentence objective: none (data.sentence_objective=none). The loss is the masked-LM loss alone; "
            "the sentence head and the pooler were not trained (their initialisation, as `hf/README.md` says)."
        )
    else:
        parts.append(
            f"Sentence objective: {OBJECTIVES.get(objective, objective)}; loss = masked LM + {objective.upper()}."
        )
    if curves:
        parts.append(f"![Pretraining curves]({curves})")
    if train:
        last = train[-1]
        keys = [
            "step",
            "mlm_loss",
            "mlm_accuracy",
            "sop_loss",
            "sop_accuracy",
            "lr",
            "grad_norm",
            "tokens_per_s",
            "mfu",
            "peak_memory_gb",
        ]
        row = sentence_columns({k: last.get(k) for k in keys}, objective)
        parts.append("Last training log line:\n\n" + table(list(row), [list(row.values())]))
    if final_eval:
        flat = sentence_columns(flatten(final_eval), objective)
        parts.append("Final validation metrics:\n\n" + table(list(flat), [list(flat.values())]))
    return "\n\n".join(parts)


def health_section(manifest: dict | None, events: list[dict]) -> str:
    """Training health's events (pipelines/train/health.py), marked on the curves above too."""
    parts = ["## Training health"]
    if manifest is None:
        return "\n\n".join(parts + [not_run("pretrain")])
    if not events:
        return "\n\n".join(parts + ["No event: no step skipped, no spike, no rollback, no plateau warning."])
    counts = ", ".join(
        f"{sum(e['event'] == kind for e in events)} {kind}"
        for kind in HEALTH_EVENTS
        if any(e["event"] == kind for e in events)
    )
    rows = [[e["step"], e["event"], describe(e)] for e in events]
    return "\n\n".join(
        parts + [f"Events ({counts}; vertical lines on the curves):", table(["step", "event", "what"], rows)]
    )


def figure1_section(transitions: list[LayerTransition], figure: str | None, examples: int) -> str:
    parts = ["## Layer transitions (the ALBERT paper's Figure 1)"]
    if not transitions:
        return "\n\n".join(parts + [not_run("pretrain")])
    parts.append(
        f"L2 distance and cosine similarity between each layer's input and output embeddings of the "
        f"pretrained model, averaged over the tokens of {examples} validation examples."
    )
    if figure:
        parts.append(f"![L2 distance and cosine similarity per layer]({figure})")
    parts.append(
        table(
            ["layer", "L2 distance", "cosine similarity"],
            [[t.step + 1, t.l2_distance, t.cosine_similarity] for t in transitions],
        )
    )
    return "\n\n".join(parts)


def suite_section(manifest: dict | None, rows: list[dict[str, Any]]) -> str:
    """The evaluation suite (finetune.tasks): a row per task from finetune/suite.json."""
    parts = ["## Evaluation suite"]
    if manifest is None:
        return "\n\n".join(parts + [not_run("finetune")])
    repeats = any("mean" in r for r in rows)
    random = any("random_init" in r for r in rows)
    headers = ["task", "family", "metric", "best"]
    headers += ["mean ± std over seeds"] if repeats else []
    headers += ["no pretraining (init=random)"] if random else []
    headers += ["trials", "also"]
    body = []
    for r in rows:
        line = [r["task"], r["family"], r["metric"], r["best"]]
        if repeats:
            line.append(f"{r['mean']:.4f} ± {r['std']:.4f} ({r['seeds']} seeds)" if "mean" in r else None)
        if random:
            line.append(r.get("random_init"))
        body.append(line + [r["trials"], r.get("also", "")])
    parts.append(
        "Each task was searched by Ray Tune on its own; `best` is the best trial's eval metric, its model in "
        "`finetune/<task>/best/` with its search in `finetune/<task>/trials.csv`."
    )
    parts.append(table(headers, body))
    return "\n\n".join(parts)


def cost_section(rows: list[dict[str, Any]]) -> str:
    """`rows`: stage, wall_s, cpu_hours, gpu_hours, note."""
    body = table(
        ["stage", "wall time (s)", "CPU hours", "GPU hours", "note"],
        [[r["stage"], r.get("wall_s"), r.get("cpu_hours"), r.get("gpu_hours"), r.get("note", "")] for r in rows],
    )
    known = [r for r in rows if r.get("wall_s") is not None]
    total = table(
        ["total", "wall time (s)", "CPU hours", "GPU hours"],
        [
            [
                "all stages",
                sum(r["wall_s"] for r in known),
                sum(r.get("cpu_hours") or 0.0 for r in known),
                sum(r.get("gpu_hours") or 0.0 for r in known),
            ]
        ],
    )
    return "\n\n".join(
        [
            "## Cost per stage",
            "CPU and GPU hours are the logical CPUs and GPUs Ray reserved for the stage's tasks, actors "
            "and trainers, integrated over its wall time (sampled once a second by the DAG). Logical CPUs "
            "are Ray's count, not the machine's cores: `make run`'s local head declares at least 4 (a "
            "training worker and Ray Data's read tasks each need one), on 2 cores too. A stage "
            "that ran outside the DAG has its wall time from its manifest only.",
            body,
            total,
        ]
    )
