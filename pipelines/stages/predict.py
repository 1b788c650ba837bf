"""`albert-ray predict`: a fine-tuned model over a table of any size, streamed through Ray Data: the
table's files listed and their columns checked first (pipelines/inference/table_files.py), then read
file by file in bounded memory (a FileBasedDatasource over pipelines/inference/reading.py),
rows predicted by an actor pool that holds the model (one replica per GPU where the cluster has
GPUs), written as parquet under {run_dir}/predict/predictions/: `id`, `prediction` (the class name,
a number, or a list of classes), `probabilities`, the gold `label` where predict.label_column is
set, and `rejected` (null, or why the row was not predicted). The manifest counts rows read,
predicted and rejected by reason, with examples, and, with gold labels, the fine-tuning stage's
metrics on these rows."""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import ray
import torch
from ray.data.datasource import FileBasedDatasource

from ..config import Config
from ..finetuning.families import task_family
from ..inference.predictor import Predictor, model_kind
from ..inference.reading import random_access, stream_rows
from ..inference.table_files import input_tables
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import read_manifest_at, stage_dir
from ..storage import arrow_filesystem, join, key_relpath
from ..storage.models import applied_length, materialize, read_model_files
from .ray_runtime import init_ray

log = logging.getLogger(__name__)

PREDICTIONS = "predictions"
MAX_EXAMPLES = 20


def predict_model(config: Config) -> str:
    """predict.model, or the fine-tuning stage's best model."""
    return config.predict.model or join(stage_dir(config, "finetune"), "best")


def sequence_length(config: Config, model_config: dict[str, Any], model: str) -> int:
    """predict.max_seq_length; else the length the model was fine-tuned at, as its folder records it;
    else, for the run's own model exported before that record, the fine-tuning stage's; else 512
    capped by its position embeddings (storage.models.applied_length)."""
    fallback = None
    if not config.predict.model:
        manifest = read_manifest_at(stage_dir(config, "finetune")) or {}
        fallback = (manifest.get("config") or {}).get("finetune", {}).get("max_seq_length")
    return applied_length(model_config, config.predict.max_seq_length, "predict.max_seq_length", model, fallback)


class TableRows(FileBasedDatasource):
    """The files of predict.input as rows of reading.SCHEMA plus `path`."""

    def __init__(self, paths: list[str], columns: dict[str, str | None], **kwargs: Any):
        super().__init__(paths, **kwargs)
        self.columns = columns

    def _open_input_source(self, filesystem: pa.fs.FileSystem, path: str, **open_args: Any) -> pa.NativeFile:
        # parquet's footer is at its end: a random-access file, as Ray Data's own ORC reader opens
        # one (its row groups are still read one at a time)
        if random_access(path):
            return filesystem.open_input_file(path)
        return super()._open_input_source(filesystem, path, **open_args)

    def _read_stream(self, f: pa.NativeFile, path: str):
        for table in stream_rows(f, path, **self.columns):
            yield table.append_column("path", pa.array([path] * table.num_rows, pa.string()))


class PredictRows:
    """A Ray Data actor holding the model: a block of rows in, their predictions out."""

    def __init__(self, files: dict[str, bytes], max_seq_length: int, batch_size: int, root: str, cpus: float):
        torch.set_num_threads(max(1, int(cpus)))
        self.work = tempfile.mkdtemp(prefix="albert-predict-")
        self.predictor = Predictor.load(materialize(files, self.work), max_seq_length, batch_size)
        self.root = root

    def place(self, path: str, row: int) -> str:
        return f"{key_relpath(path, self.root)}:{row}" if path != self.root else str(row)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pydict()
        count = batch.num_rows
        usable = [i for i in range(count) if rows["rejected"][i] is None]  # reading.py says why not
        pairs = [rows["pair"][i] for i in usable]
        outputs = self.predictor.predict(
            [rows["text"][i] for i in usable], pairs if any(p is not None for p in pairs) else None
        )
        prediction: list[Any] = [None] * count
        probabilities: list[Any] = [None] * count
        for i, out in zip(usable, outputs):
            prediction[i], probabilities[i] = out["prediction"], out["probabilities"]
        ids = [
            rows["id"][i] if rows["id"][i] is not None else self.place(rows["path"][i], rows["row"][i])
            for i in range(count)
        ]
        kind = self.predictor.kind
        types = {"classification": pa.string(), "regression": pa.float64(), "multi_label": pa.list_(pa.string())}
        return pa.table(
            {
                "id": pa.array(ids, pa.string()),
                "prediction": pa.array(prediction, types[kind]),
                "probabilities": pa.array(probabilities, pa.list_(pa.float64())),
                "label": pa.array(rows["label"], pa.string()),
                "rejected": pa.array(rows["rejected"], pa.string()),
            }
        )


def gold_metrics(kind: str, names: list[str] | None, table: pa.Table, delimiter: str) -> dict[str, Any]:
    """The fine-tuning stage's metrics on the predicted rows with a gold label (rows whose label
    is not one of the model's classes are counted, not scored)."""
    targets, scores, unknown = [], [], 0
    for label, prediction, probabilities in zip(
        table["label"].to_pylist(), table["prediction"].to_pylist(), table["probabilities"].to_pylist()
    ):
        if label is None:
            continue
        gold = json.loads(label)
        if kind == "regression":
            try:
                targets.append(float(gold))
            except (TypeError, ValueError):
                unknown += 1
                continue
            scores.append([prediction])
        elif kind == "multi_label":
            classes = gold if isinstance(gold, list) else [c.strip() for c in str(gold).split(delimiter) if c.strip()]
            if any(str(c) not in names for c in classes):
                unknown += 1
                continue
            targets.append([int(n in {str(c) for c in classes}) for n in names])
            p = np.clip(np.asarray(probabilities), 1e-12, 1 - 1e-12)
            scores.append(np.log(p / (1 - p)))  # the logits behind the sigmoids
        else:
            if str(gold) not in names:
                unknown += 1
                continue
            targets.append(names.index(str(gold)))
            scores.append(np.log(np.clip(np.asarray(probabilities), 1e-300, None)))  # softmax(log p) = p
    metrics = (
        task_family(kind).metrics_of(np.asarray(scores), np.asarray(targets), len(names or [1])) if targets else {}
    )
    return {"rows": len(targets), "label_not_a_class": unknown, **metrics}


def build_predict(run: StageRun) -> dict:
    """predictions/*.parquet in the stage's folder; returns the manifest's fields."""
    config, pc = run.config, run.config.predict
    columns = {"text": pc.text_column, "pair": pc.text_pair_column, "id_column": pc.id_column, "label": pc.label_column}
    tables = input_tables(pc.input, columns)
    model = predict_model(config)
    files = read_model_files(model, "predict.model", "; the default {run_dir}/finetune/best needs the finetune stage")
    model_config = json.loads(files["config.json"])
    kind, names = model_kind(model_config, model)
    length = sequence_length(config, model_config, model)
    init_ray()
    cluster = ray.cluster_resources()
    gpus = int(cluster.get("GPU", 0))
    workers = pc.workers or (gpus or max(1, int(cluster.get("CPU", 1)) - 1))
    cpus = 1.0 if gpus else 0.5  # fractional: Ray Data's read tasks need a CPU beside the replicas
    rows = ray.data.read_datasource(TableRows(tables.files, columns, filesystem=tables.filesystem))
    predicted = rows.map_batches(
        PredictRows,
        fn_constructor_kwargs={
            "files": files,
            "max_seq_length": length,
            "batch_size": pc.batch_size,
            "root": tables.root,
            "cpus": cpus,
        },
        batch_format="pyarrow",
        batch_size=1024,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=cpus,
        num_gpus=1 if gpus else 0,
    )
    out_fs, out = arrow_filesystem(run.path(PREDICTIONS))
    predicted.write_parquet(out, filesystem=out_fs)
    written = pads.dataset(out, filesystem=out_fs, format="parquet")
    reasons, examples, total = Counter(), [], 0
    for batch in written.to_batches(columns=["id", "rejected"]):
        total += batch.num_rows
        for row_id, reason in zip(batch["id"].to_pylist(), batch["rejected"].to_pylist()):
            if reason is not None:
                reasons[reason] += 1
                if len(examples) < MAX_EXAMPLES:
                    examples.append(f"{pc.input} {row_id}: {reason}")
    fields: dict[str, Any] = {
        "model": model,
        "input": pc.input,
        "kind": kind,
        "label_names": names,
        "max_seq_length": length,
        "rows": {"read": total, "predicted": total - sum(reasons.values()), "rejected": dict(reasons)},
        "rejection_examples": examples,
        "files": {
            "read": len(tables.files),
            "skipped": len(tables.skipped),
            "skipped_examples": tables.skipped[:MAX_EXAMPLES],
        },
        "workers": workers,
    }
    if pc.label_column:
        scored = written.to_table(
            columns=["label", "prediction", "probabilities"], filter=pads.field("rejected").is_null()
        )
        fields["metrics"] = gold_metrics(kind, names, scored, pc.label_delimiter)
    print(
        f"predict: {fields['rows']['predicted']} of {total} rows predicted"
        + (f", {sum(reasons.values())} rejected ({dict(reasons)})" if reasons else "")
        + f" -> {join(run.current, PREDICTIONS)}"
        + (
            f"; skipped, not tables: {', '.join(tables.skipped[:3])}" + (", ..." if len(tables.skipped) > 3 else "")
            if tables.skipped
            else ""
        ),
        flush=True,
    )
    if fields.get("metrics"):
        shown = {k: v for k, v in fields["metrics"].items() if isinstance(v, float) and math.isfinite(v)}
        print("predict: " + ", ".join(f"{k} {v:.4f}" for k, v in shown.items()), flush=True)
    return fields


run_predict = stage_runner("predict")
