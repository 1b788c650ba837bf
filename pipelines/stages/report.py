"""`albert-ray report`: {run_dir}/report/report.md and its figures from the other stages' outputs."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import logging
import tempfile
from dataclasses import asdict
from datetime import datetime, timezone

import pyarrow.parquet as pq

from albert_model.hf import load_hf_pretrained

from ..config import SETTINGS, Config, dump_yaml
from ..finetuning.families import unread_keys
from ..report import markdown
from ..report.depth import TRADEOFF_PNG, depth_section
from ..report.finetuning import CONFUSION_PNG, CURVE_PNG, confusion, finetune_section, single_class
from ..report.layers import LayerTransition, layer_transitions, pad_examples, unmask
from ..report.plots import (
    confusion_figure,
    finetune_curve_figure,
    layer_transitions_figure,
    pretraining_curves,
    tradeoff_figure,
)
from ..rundir.costs import read_cost
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import STAGES, pretrained_dir, read_manifest, stage_dir, stage_inputs
from ..storage import (
    exists,
    filesystem,
    join,
    parquet_files,
    read_bytes,
    read_json,
    read_jsonl,
    write_bytes,
    write_text,
)
from ..train.health import HEALTH_EVENTS
from .stage_tracking import start_tracking

log = logging.getLogger(__name__)

FIGURE1_EXAMPLES = 32
CURVES_PNG = "pretraining_curves.png"
FIGURE1_PNG = "layer_transitions.png"
FIGURE1_JSON = "layer_transitions.json"
REPORT = "report.md"


def read_metrics(path: str) -> tuple[list[dict], list[dict], list[dict]]:
    """metrics.jsonl (read once) as (training lines, validation lines, training health's events)."""
    records = read_jsonl(path)
    return (
        [r for r in records if r.get("split", "train") == "train" and "event" not in r],
        [r for r in records if r.get("split") == "validation"],
        [r for r in records if r.get("event") in HEALTH_EVENTS],
    )


def read_csv(path: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(read_bytes(path).decode()))) if exists(path) else []


def first_examples(data_dir: str, n: int) -> list[dict]:
    """The first `n` examples of the validation split (the train split if it has none)."""
    for split in ("validation", "train"):
        fs, files = parquet_files(join(data_dir, split))
        rows: list[dict] = []
        for f in files:
            rows += pq.read_table(f, filesystem=fs).slice(0, n - len(rows)).to_pylist()
            if len(rows) >= n:
                break
        if rows:
            return rows
    return []


def compute_figure1(config: Config) -> tuple[list[LayerTransition], int]:
    """Figure 1 of the trained model in {run_dir}/pretrain/hf on unmasked validation examples, and
    how many examples."""
    hf_dir = join(stage_dir(config, "pretrain"), "hf")
    examples = first_examples(stage_dir(config, "data"), FIGURE1_EXAMPLES)
    if not exists(join(hf_dir, "config.json")) or not examples:
        return [], 0
    fs, path = filesystem(hf_dir)
    with tempfile.TemporaryDirectory() as local:
        if "://" in hf_dir:  # load_hf_pretrained reads a local folder
            fs.get(path.rstrip("/") + "/", local + "/", recursive=True)
            path = local
        model = load_hf_pretrained(path)
    return layer_transitions(model, **pad_examples([unmask(e) for e in examples])), len(examples)


def cost_rows(config: Config, manifests: dict[str, dict | None]) -> list[dict]:
    rows = []
    for name in STAGES:
        if name == "report":
            continue
        manifest, cost = manifests.get(name), read_cost(config.run_dir, name)
        if manifest is None:
            rows.append({"stage": name, "note": "not run"})
        elif cost is not None and cost.get("fingerprint") == manifest.get("fingerprint"):
            rows.append(
                {
                    "stage": name,
                    **cost,
                    "note": f"ran {datetime.fromtimestamp(cost['started'], timezone.utc):%Y-%m-%d %H:%M} UTC"
                    f" on a cluster of {cost['cluster_cpus']:g} logical CPUs, {cost['cluster_gpus']:g} GPUs",
                }
            )
        else:
            rows.append({"stage": name, "wall_s": manifest.get("seconds"), "note": "ran outside the DAG"})
    return rows


def applies(config: Config) -> list[str]:
    """The finetune keys that change the configured task's result (those only other families read,
    and the settings, which change no result, left out)."""
    unread = unread_keys(config.finetune.task)
    keys = [f"finetune.{f.name}" for f in dataclasses.fields(config.finetune)]
    return [key.partition(".")[2] for key in keys if key not in unread and key not in SETTINGS]


def finetune_plots(run: StageRun, best: dict | None, predictions: list[dict]) -> dict[str, str]:
    """The best trial's curve and, for one class per example, the confusion matrix, drawn into the
    stage's folder; their names by figure."""
    drawn = {}
    if best and best.get("epochs"):
        write_bytes(run.path(CURVE_PNG), finetune_curve_figure(best["epochs"], best["metric"]))
        drawn[CURVE_PNG] = CURVE_PNG
    names = (best or {}).get("label_names")
    if best and single_class(predictions, names):
        write_bytes(run.path(CONFUSION_PNG), confusion_figure(confusion(predictions, names), names))
        drawn[CONFUSION_PNG] = CONFUSION_PNG
    return drawn


def build_report(run: StageRun) -> dict:
    """report.md, its figures and layer_transitions.json in the stage's folder; returns the manifest's fields."""
    config = run.config
    manifests = {name: read_manifest(config, name) for name in STAGES if name != "report"}
    pretrain_dir = stage_dir(config, "pretrain")
    train, validation, events = read_metrics(join(pretrain_dir, "metrics.jsonl"))
    objective = markdown.sentence_objective(manifests["data"], config.data.sentence_objective)
    figures = []
    if train:
        write_bytes(run.path(CURVES_PNG), pretraining_curves(train, validation, events, objective))
        figures.append(CURVES_PNG)
    transitions, examples = compute_figure1(config) if manifests["pretrain"] else ([], 0)
    if transitions:
        write_bytes(run.path(FIGURE1_PNG), layer_transitions_figure(transitions, f"ALBERT-{config.model.preset}"))
        write_text(run.path(FIGURE1_JSON), json.dumps([asdict(t) for t in transitions], indent=2) + "\n")
        figures.append(FIGURE1_PNG)

    finetune_dir = stage_dir(config, "finetune")
    suite = "tasks" in (manifests["finetune"] or {})
    best = None if suite else read_json(join(finetune_dir, "best.json"))
    predictions = read_jsonl(join(finetune_dir, "predictions.jsonl")) if best else []
    finetune_figures = finetune_plots(run, best, predictions)
    figures += list(finetune_figures.values())
    finetuned = join(finetune_dir, "<task>", "best") if suite else join(finetune_dir, "best")
    distilling = "distill" in stage_inputs(config, "report") and manifests["distill"]
    distilled = read_json(join(stage_dir(config, "distill"), "best.json")) if distilling else None
    tradeoff = (manifests["distill"] or {}).get("tradeoff") if distilled else None
    if tradeoff:
        write_bytes(run.path(TRADEOFF_PNG), tradeoff_figure(tradeoff["arms"], distilled["metric"]))
        figures.append(TRADEOFF_PNG)
    # the encoder fine-tuning started from (its manifest: finetune.pretrained, which may be elsewhere)
    used_pretrained = (manifests["finetune"] or {}).get("pretrained") or pretrained_dir(config)
    sections = [
        f"# ALBERT run report\n\n`{config.run_dir}`, written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC. "
        f"Models (transformers format): pretrained `{used_pretrained}`, "
        f"fine-tuned `{finetuned}`.",
        markdown.data_section(manifests["vocab"], manifests["data"]),
        markdown.pretrain_section(
            manifests["pretrain"],
            train,
            read_json(join(pretrain_dir, "eval.json")),
            CURVES_PNG if CURVES_PNG in figures else None,
            objective,
        ),
        markdown.health_section(manifests["pretrain"], events),
        markdown.figure1_section(transitions, FIGURE1_PNG if transitions else None, examples),
        markdown.suite_section(manifests["finetune"], read_json(join(finetune_dir, "suite.json")) or [])
        if suite
        else finetune_section(
            manifests["finetune"],
            read_csv(join(finetune_dir, "trials.csv")),
            best,
            predictions,
            applies(config),
            finetune_figures,
        ),
        depth_section(distilled, manifests["predict"], tradeoff, TRADEOFF_PNG if tradeoff else None),
        markdown.cost_section(cost_rows(config, manifests)),
        f"## Configuration\n\n```yaml\n{dump_yaml(config)}```",
    ]
    write_text(run.path(REPORT), "\n\n".join(s for s in sections if s) + "\n")
    log.info("report in %s", join(run.current, REPORT))
    with start_tracking(config, "report", "report", {}, run.out) as tracked:  # MLflow only: report.md, figures
        tracked.log_files([run.path(REPORT), *(run.path(f) for f in figures)], "report")
    return {
        "report": join(run.current, REPORT),
        "figures": figures,
        "inputs": {dep: (manifests[dep] or {}).get("fingerprint", "") for dep in stage_inputs(config, "report")},
    }


run_report = stage_runner("report")
