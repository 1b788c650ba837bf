"""`albert-ray predict`: a fine-tuned model over a table of any size, streamed through Ray Data, applied
as its task family says (pipelines/inference/predictor.py): the input's files listed and checked first
(pipelines/inference/table_files.py), then read file by file in bounded memory (a FileBasedDatasource
over pipelines/inference/reading.py; a file of the family's own format, such as SQuAD JSON, read
whole by the family), each row's fields checked by the family where it is read, rows predicted by an
actor pool that holds the model (one replica per GPU where the cluster has GPUs), written as parquet
under {run_dir}/predict/predictions/: `id`, the family's output columns, the gold `label` where
predict.label_column is set, and `rejected` (null, or why the row was not predicted). The manifest
counts rows read, predicted and rejected by reason, with examples, and, with gold labels, the
fine-tuning's metrics on these rows where the family scores them. With predict.output_kind=embedding
each row gets its sentence vector instead (`embedding`: pipelines/inference/embedding.py), from any
model folder's encoder."""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch

from ..config import Config, PredictSection
from ..errors import BadInput
from ..finetuning.inference import FamilyInference
from ..inference.columns import Columns, table_columns
from ..inference.embedding import EMBEDDING, EMBEDDING_ROWS, ENCODER_OUTPUTS, Embedder, has_task_head, rows_inference
from ..inference.onnx_runner import ONNX_FILE, read_onnx
from ..inference.predictor import EXIT_DEPTH, Predictor, exit_rule_of, family_of, inference_of, use_of_files
from ..inference.reading import file_rows, open_input
from ..inference.table_files import InputTables, input_tables
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import read_manifest_at, stage_dir
from ..storage import arrow_filesystem, join, key_relpath, write_text
from ..storage.models import applied_length, materialize, read_model_files, tokenizer_length

log = logging.getLogger(__name__)

PREDICTIONS = "predictions"
MAX_EXAMPLES = 20
READ_BLOCK = 1024
"""Rows a replica takes at once (sorted by length within, to limit padding)."""


def predict_model(config: Config) -> str:
    """predict.model, or the fine-tuning stage's best model."""
    return config.predict.model or join(stage_dir(config, "finetune"), "best")


def sequence_length(config: Config, model_config: dict[str, Any], model: str, trained: int | None) -> int:
    """predict.max_seq_length; else the length the model was fine-tuned at, as its folder records it;
    else its tokenizer's (`trained`: storage.models.tokenizer_length); else, for the run's own model
    exported before that record, the fine-tuning stage's; else 512 capped by its position embeddings
    (storage.models.applied_length)."""
    fallback = None
    if not config.predict.model:
        manifest = read_manifest_at(stage_dir(config, "finetune")) or {}
        fallback = (manifest.get("config") or {}).get("finetune", {}).get("max_seq_length")
    return applied_length(
        model_config, config.predict.max_seq_length, "predict.max_seq_length", model, fallback, trained
    )


class PredictRows:
    """A Ray Data actor holding the model: a block of rows in, their predictions out (or, with
    `embedding` (pooling, normalize), their sentence vectors)."""

    def __init__(
        self,
        files: dict[str, bytes],
        max_seq_length: int,
        batch_size: int,
        root: str,
        cpus: float,
        exit_rule: tuple[int | None, float | None] = (None, None),
        embedding: tuple[str, bool] | None = None,
        precision: str = "auto",
    ):
        torch.set_num_threads(max(1, int(cpus)))
        # the files are written to be loaded, then removed: everything is in memory once loaded, and
        # an actor that Ray Data ends runs no cleanup, so a folder kept would outlive each run on its node
        with tempfile.TemporaryDirectory(prefix="albert-predict-") as work:
            folder = materialize(files, work)
            onnx = os.path.join(folder, ONNX_FILE) if ONNX_FILE in files else None  # predict.backend=onnx
            patience, entropy = exit_rule
            if embedding is not None:
                pooling, normalize = embedding
                self.predictor: Predictor | Embedder = Embedder.load(
                    folder, max_seq_length, batch_size, onnx=onnx, pooling=pooling, normalize=normalize
                )
            else:
                self.predictor = Predictor.load(
                    folder,
                    max_seq_length,
                    batch_size,
                    onnx=onnx,
                    exit_patience=patience,
                    exit_entropy=entropy,
                    precision=precision,
                )
        self.root = root

    def place(self, path: str, row: int) -> str:
        return f"{key_relpath(path, self.root)}:{row}" if path != self.root else str(row)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pydict()
        count = batch.num_rows
        usable = [i for i in range(count) if rows["rejected"][i] is None]  # reading.py says why not
        outputs, rejected = self.predictor.run([json.loads(rows["cells"][i]) for i in usable])
        reasons = list(rows["rejected"])
        types = self.predictor.output
        columns: dict[str, list[Any]] = {name: [None] * count for name in types}
        for j, (i, out) in enumerate(zip(usable, outputs)):
            if j in rejected:  # what only encoding found (a text of nothing the tokenizer keeps)
                reasons[i] = rejected[j]
                continue
            for name in types:
                columns[name][i] = out[name]
        ids = [
            rows["id"][i] if rows["id"][i] is not None else self.place(rows["path"][i], rows["row"][i])
            for i in range(count)
        ]
        data = {"id": ids, **columns, "label": rows["label"], "rejected": reasons}
        return pa.Table.from_pydict(data, schema=output_schema(types))


def output_columns(inference: FamilyInference, pc: PredictSection) -> dict[str, pa.DataType]:
    """The family's output columns (or the embedding's), and `exit_depth` where predict exits early."""
    return {**inference.output, **({EXIT_DEPTH: pa.int32()} if pc.exits_early else {})}


def output_schema(output: dict[str, pa.DataType]) -> pa.Schema:
    """The predictions' columns: `id`, the outputs (output_columns), the gold `label` and `rejected`."""
    outputs = [pa.field(name, kind) for name, kind in output.items()]
    return pa.schema([pa.field("id", pa.string()), *outputs, ("label", pa.string()), ("rejected", pa.string())])


def embedding_of(pc: PredictSection) -> tuple[str, bool] | None:
    """PredictRows' `embedding`: (pooling, normalize) where predict embeds, else None."""
    return (pc.pooling, pc.normalize) if pc.embeds else None


def predict_here(
    tables: InputTables,
    columns: Columns,
    kind: str,
    files: dict[str, bytes],
    length: int,
    pc: PredictSection,
    out_fs: pafs.FileSystem,
    out: str,
) -> None:
    """A small input predicted in this process: its files read one after another as Ray Data's read
    tasks read them, blocks of READ_BLOCK rows predicted as PredictRows predicts them, one parquet
    file written. No Ray: starting or joining a cluster and its actors costs more than such rows.
    `kind`: the family's name, or EMBEDDING."""
    inference = rows_inference(kind)
    exits = (pc.exit_patience, pc.exit_entropy)
    actor = PredictRows(
        files, length, pc.batch_size, tables.root, torch.get_num_threads(), exits, embedding_of(pc), pc.precision
    )
    out_fs.create_dir(out)
    schema = output_schema(output_columns(inference, pc))
    with pq.ParquetWriter(f"{out}/rows.parquet", schema, filesystem=out_fs) as writer:
        for path in tables.files:
            own = path in tables.own
            with open_input(tables.filesystem, path, own) as f:
                for table in file_rows(f, path, columns, inference, own):
                    for block in table.to_batches(max_chunksize=READ_BLOCK):
                        writer.write_table(actor(pa.Table.from_batches([block])))


TASK_CPUS = 1.0
"""What Ray Data's read and write tasks need beside the replicas: a CPU (theirs by default)."""


def check_pool(workers: int, cpus: float, gpu: bool) -> None:
    """On a cluster that nothing adds nodes to, `workers` replicas of `cpus` CPUs (and a GPU each
    where `gpu`) and a CPU for Ray Data's read and write tasks beside them must fit its nodes:
    otherwise the pool waits for room for ever (Ray Data's wait_for_min_actors_s is unbounded by
    default), one read task starved of its CPU, and predict never ends."""
    from .ray_runtime import fixed_room, resources

    room = fixed_room({"CPU": cpus, "GPU": float(gpu)})
    if room is None:
        return
    beside = math.floor((room.cpus - TASK_CPUS) / cpus + 1e-9)
    most = max(0, min(room.total, beside))
    if workers > most:
        raise BadInput(
            f"predict.workers={workers}: this Ray cluster holds {most} model replica{'s' * (most != 1)} of "
            f"{resources(cpus, 1.0 if gpu else None)} each beside a CPU for reading and writing ({room.nodes}): "
            "ask for fewer"
        )


def predict_on_ray(
    tables: InputTables,
    columns: Columns,
    kind: str,
    files: dict[str, bytes],
    length: int,
    pc: PredictSection,
    out_fs: pafs.FileSystem,
    out: str,
) -> int:
    """The input streamed through Ray Data (read tasks, an actor pool holding the model, parquet
    written by the write tasks); returns the number of model replicas."""
    import ray

    from .predict_source import TableRows
    from .ray_runtime import init_ray

    init_ray()
    cluster = ray.cluster_resources()
    gpus = int(cluster.get("GPU", 0)) if pc.backend == "torch" else 0  # onnxruntime runs on CPU here
    workers = pc.workers or (gpus or max(1, int(cluster.get("CPU", 1)) - 1))
    cpus = 1.0 if gpus else 0.5  # fractional: Ray Data's read tasks need a CPU beside the replicas
    check_pool(workers, cpus, bool(gpus))
    source = TableRows(tables.files, columns, kind, tables.own, filesystem=tables.filesystem)
    predicted = ray.data.read_datasource(source).map_batches(
        PredictRows,
        fn_constructor_kwargs={
            "files": files,
            "max_seq_length": length,
            "batch_size": pc.batch_size,
            "root": tables.root,
            "cpus": cpus,
            "exit_rule": (pc.exit_patience, pc.exit_entropy),
            "embedding": embedding_of(pc),
            "precision": pc.precision,
        },
        batch_format="pyarrow",
        batch_size=READ_BLOCK,
        compute=ray.data.ActorPoolStrategy(size=workers),
        num_cpus=cpus,
        num_gpus=1 if gpus else 0,
    )
    predicted.write_parquet(out, filesystem=out_fs)
    return workers


def output_rows(written: pads.Dataset, inference: FamilyInference, scored: bool = False) -> list[dict[str, Any]]:
    """The written rows (id, the family's output columns, label, rejected); `scored`: only the
    predicted rows with a gold label."""
    where = (pads.field("rejected").is_null() & pads.field("label").is_valid()) if scored else None
    return written.to_table(columns=["id", *inference.output, "label", "rejected"], filter=where).to_pylist()


def build_predict(run: StageRun) -> dict:
    """predictions/*.parquet in the stage's folder (and the family's own files beside it for an input
    of its own format); returns the manifest's fields."""
    config, pc = run.config, run.config.predict
    model = predict_model(config)
    files = read_model_files(model, "predict.model", "; the default {run_dir}/finetune/best needs the finetune stage")
    model_config = json.loads(files["config.json"])
    if pc.embeds:  # any folder's encoder: a fine-tuned head's is not read
        has_task_head(model_config, model)
        kind, inference, outputs = EMBEDDING, EMBEDDING_ROWS, ENCODER_OUTPUTS
    else:
        family = family_of(model_config, model)
        kind, inference, outputs = family.name, inference_of(family, model), family.outputs
        # refused here, before any replica loads the model (the config refuses it with the onnx backend)
        exit_rule_of(family, inference, pc.exit_patience, pc.exit_entropy, "predict.model", onnx=False)
    columns = table_columns(pc, inference)
    tables = input_tables(pc.input, columns, inference)
    length = sequence_length(config, model_config, model, tokenizer_length(files.get("tokenizer_config.json")))
    use = use_of_files(files, model_config, length, model)
    if pc.backend == "onnx":
        files = {**files, ONNX_FILE: read_onnx(pc.onnx, "predict.onnx", model_config, outputs, model)[0]}
    out_fs, out = arrow_filesystem(run.path(PREDICTIONS))
    if pc.workers is None and tables.size <= pc.in_process_bytes:
        print(
            f"predict: {len(tables.files)} file(s), {tables.size:,} bytes: predicted in this process, without Ray "
            f"(predict.in_process_bytes={pc.in_process_bytes:,})",
            flush=True,
        )
        workers = 0
        predict_here(tables, columns, kind, files, length, pc, out_fs, out)
    else:
        workers = predict_on_ray(tables, columns, kind, files, length, pc, out_fs, out)
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
        "backend": pc.backend,
        "label_names": use.label_names,
        "max_seq_length": length,
        "columns": columns.keys(),
        "rows": {"read": total, "predicted": total - sum(reasons.values()), "rejected": dict(reasons)},
        "rejection_examples": examples,
        "files": {
            "read": len(tables.files),
            "own_format": len(tables.own),
            "skipped": len(tables.skipped),
            "skipped_examples": tables.skipped[:MAX_EXAMPLES],
        },
        "workers": workers,
    }
    if pc.embeds:
        fields["embedding"] = {"pooling": pc.pooling, "normalize": pc.normalize}
    if pc.exits_early:
        depths = Counter(d for d in written.to_table(columns=[EXIT_DEPTH])[EXIT_DEPTH].to_pylist() if d is not None)
        fields["exit_depths"] = {str(d): n for d, n in sorted(depths.items())}
        fields["exit_rule"] = {"patience": pc.exit_patience, "entropy": pc.exit_entropy}
    scorer = getattr(inference, "metrics", None)
    if scorer is not None and (pc.label_column or tables.own):  # a family's own files may hold gold labels
        gold = output_rows(written, inference, scored=True)
        if pc.label_column or gold:
            outputs = [{k: r[k] for k in inference.output} for r in gold]
            fields["metrics"] = scorer([json.loads(r["label"]) for r in gold], outputs, use, pc)
    writer = getattr(inference, "files", None)
    if tables.own and writer is not None:
        own = writer(output_rows(written, inference))
        for name, text in own.items():
            if "/" in name or name.startswith(".") or name in (PREDICTIONS, "manifest.json", "config.yaml"):
                raise ValueError(f"{kind}'s inference names a file {name!r} beside predictions/")
            write_text(run.path(name), text)
        fields["family_files"] = sorted(own)
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
    if total and not fields["rows"]["predicted"]:  # an output of rejections alone is seldom what was meant
        (reason, n), example = reasons.most_common(1)[0], examples[0]
        print(f"predict: warning: no row was predicted; {n} of {total} were {reason} (first: {example})", flush=True)
    if fields.get("metrics"):
        against = f"predict.label_column={pc.label_column}" if pc.label_column else "the files' gold labels"
        print("predict: " + metrics_line(fields["metrics"], against, fields["rows"]["predicted"]), flush=True)
    return fields


def metrics_line(metrics: dict[str, Any], against: str, predicted: int) -> str:
    """The console's line of a family's metrics (its inference's `metrics`): the rows scored
    `against` the gold labels, those left unscored by reason (label_not_a_class, ...), the metrics."""
    unscored = [f"{n} {reason}" for reason, n in metrics.items() if type(n) is int and reason != "rows" and n]
    line = f"{metrics['rows']} of {predicted} rows scored against {against}"
    line += f" ({', '.join(unscored)}, not scored)" if unscored else ""
    shown = {k: v for k, v in metrics.items() if isinstance(v, float) and math.isfinite(v)}
    return line + (": " + ", ".join(f"{k} {v:.4f}" for k, v in shown.items()) if shown else ": no gold label to score")


run_predict = stage_runner("predict")
