"""The `predict` section: a fine-tuned model applied to a table of any size (albert-ray predict, and
the DAG's predict stage when predict.input is set)."""

from __future__ import annotations

from dataclasses import field
from typing import ClassVar

from pydantic.dataclasses import dataclass

from .base import STRICT, Section, neutral_at, setting
from .sections import PRECISIONS

BACKENDS = ("torch", "onnx")
OUTPUT_KINDS = ("prediction", "embedding")
POOLINGS = ("mean", "cls")
"""A sentence vector from the last hidden layer: the mean over the text's tokens, or the [CLS] state."""


@dataclass(config=STRICT)
class PredictSection(Section):
    """Batch prediction with a fine-tuned model over a table, streamed through Ray Data."""

    SECTION: ClassVar[str] = "predict"

    input: str | None = None
    """The rows to predict: a table (csv, tsv, jsonl or parquet) or a file of the model's family's
    own format (SQuAD JSON, CoNLL); a file or a folder of them; local or s3://. null: no predict
    stage (the DAG skips it)."""
    model: str | None = None
    """A fine-tuned transformers ALBERT folder of any task family (its config.json says which);
    null = {run_dir}/finetune/best."""
    backend: str = field(default="torch", metadata=neutral_at("torch"))
    """What runs the model: torch (predict.model's weights, on GPUs where the cluster has them) or
    onnx (predict.onnx, an ONNX export of predict.model, fp32 or int8, in onnxruntime on CPU; the
    tokenizer, labels and settings still come from predict.model)."""
    onnx: str | None = field(default=None, metadata=neutral_at(None))
    """predict.backend=onnx: the ONNX file (`albert-ray export onnx predict.model FILE [--quantize
    int8]`), local or s3://; its metadata must match predict.model's config.json. null otherwise."""
    output_kind: str = field(default="prediction", metadata=neutral_at("prediction"))
    """What a row gets: prediction (the model's family's output columns) or embedding (its sentence
    vector, the `embedding` column, from the encoder of any model folder: a fine-tuned export's,
    its head ignored, or the pretrain stage's hf/)."""
    pooling: str = field(default="mean", metadata=neutral_at("mean"))
    """predict.output_kind=embedding: mean (the last hidden layer's states averaged over the text's
    tokens, padding left out) or cls (the [CLS] token's state)."""
    normalize: bool = field(default=False, metadata=neutral_at(False))
    """predict.output_kind=embedding: scale each vector to unit length (L2), so that dot products
    are cosine similarities."""
    text_column: str = "text"
    """Column holding a row's `text` field (the first segment; raw text for token classification);
    the other fields are read from the columns of their names."""
    text_pair_column: str | None = None
    """Column holding a row's `text_pair` field, the second segment of a text pair; null for single
    texts. Set, every row needs one."""
    id_column: str | None = None
    """Column whose value names each row in the output; null: the row's place (its number, 0-based
    after the header; `file:number` when predict.input is a folder)."""
    label_column: str | None = None
    """A column of gold labels, copied to the output: where the model's family scores them, the
    manifest then carries the fine-tuning stage's metrics on these rows (classes by name; numbers
    for regression; lists or predict.label_delimiter strings for multi-label; the right choice's
    index or letter for multiple choice); null: none."""
    label_delimiter: str = "|"
    """multi-label: what separates the classes in a text label cell."""
    max_seq_length: int | None = None
    """Tokens per row, [CLS] and [SEP]s included; null: the length the model was fine-tuned at, as
    its config.json records it (albert_ray.max_seq_length); without that record, the run's
    finetune.max_seq_length for the run's own model, else 512 capped by the model's positions."""
    precision: str = "auto"
    """What predict.backend=torch computes in: auto (bf16 on a GPU that has it, fp32 on a CPU), fp32
    or bf16. bf16's scores differ from fp32's by its rounding (a label can flip where two classes
    score within it); onnx runs the export's own precision (fp32, or int8)."""
    exit_patience: int | None = field(default=None, metadata=neutral_at(None))
    """Early exit (a model fine-tuned with finetune.exit_heads): a row stops once its prediction has
    not changed for this many more applications of the shared layer (PABEE); its depth is the
    `exit_depth` column. null: every row at full depth (unless predict.exit_entropy)."""
    exit_entropy: float | None = field(default=None, metadata=neutral_at(None))
    """Early exit: a row stops once its prediction's entropy (nats) falls below this; null: no threshold."""
    output: str | None = field(default=None, metadata=setting("where a copy goes"))
    """A folder (local or s3://, outside the run_dir) that the committed predictions are also
    published to: predictions/*.parquet, config.yaml and manifest.json, with a marker listing them.
    It must be absent, empty, or published to before from this run_dir: nothing else there is
    overwritten. null: only {run_dir}/predict/."""
    batch_size: int = field(default=64, metadata=setting("batching"))
    """Rows per forward pass (rows are sorted by length within a block to limit padding)."""
    workers: int | None = field(default=None, metadata=setting("parallelism"))
    """Model replicas (Ray Data actors); null: one per GPU where the cluster has GPUs, else one per
    CPU but one, or none for an input of at most predict.in_process_bytes. Set, predict always runs on
    Ray; more than a cluster nothing adds nodes to can hold (half a CPU each on CPUs, and a CPU for
    Ray Data's read and write tasks beside them) is refused."""
    in_process_bytes: int = field(default=4 * 1024 * 1024, metadata=setting("parallelism"))
    """An input whose files total at most this many bytes (as stored) is predicted in the command's
    own process, without Ray, unless predict.workers is set: starting or joining a cluster and its
    actors takes longer than such rows (200 BBC News articles, ~0.5 MB: seconds against ~50 s). The
    output is the same. 0: always Ray Data."""

    def __post_init__(self) -> None:
        for name in ("input", "model", "onnx", "output", "text_pair_column", "id_column", "label_column"):
            self.require(name, getattr(self, name) != "", "must not be empty (use null)")
        self.require("backend", self.backend in BACKENDS, f"must be one of {', '.join(BACKENDS)}")
        self.require("precision", self.precision in PRECISIONS, f"must be one of {', '.join(PRECISIONS)}")
        self.require(
            "precision",
            self.backend == "torch" or self.precision == "auto",
            "applies to predict.backend=torch (an ONNX export runs in its own precision)",
        )
        self.require(
            "onnx",
            (self.onnx is not None) == (self.backend == "onnx"),
            "must name the ONNX file where predict.backend=onnx, and only there",
        )
        self.require("output_kind", self.output_kind in OUTPUT_KINDS, f"must be one of {', '.join(OUTPUT_KINDS)}")
        self.require("pooling", self.pooling in POOLINGS, f"must be one of {', '.join(POOLINGS)}")
        for name, unset in (("pooling", self.pooling == "mean"), ("normalize", not self.normalize)):
            self.require(name, self.embeds or unset, "applies to predict.output_kind=embedding only")
        self.require("text_column", bool(self.text_column), "must not be empty")
        self.require("label_delimiter", bool(self.label_delimiter.strip()), "must not be empty or blank")
        self.require("max_seq_length", self.max_seq_length is None or self.max_seq_length >= 4, "must be >= 4 or null")
        self.require("batch_size", self.batch_size >= 1, "must be >= 1")
        self.require("exit_patience", self.exit_patience is None or self.exit_patience >= 1, "must be >= 1 or null")
        self.require("exit_entropy", self.exit_entropy is None or self.exit_entropy > 0, "must be > 0 or null")
        self.require(
            "backend",
            self.backend == "torch" or not self.exits_early,
            "must be torch with predict.exit_patience or predict.exit_entropy (early exit runs the model's "
            "depths one by one; an ONNX graph runs them all)",
        )
        self.require(
            "output_kind",
            not (self.embeds and self.exits_early),
            "must be prediction with predict.exit_patience or predict.exit_entropy (early exit settles a "
            "prediction; an embedding is the last layer's)",
        )
        self.require("workers", self.workers is None or self.workers >= 1, "must be >= 1 or null")
        self.require("in_process_bytes", self.in_process_bytes >= 0, "must be >= 0")

    @property
    def embeds(self) -> bool:
        return self.output_kind == "embedding"

    @property
    def exits_early(self) -> bool:
        return self.exit_patience is not None or self.exit_entropy is not None


__all__ = ["OUTPUT_KINDS", "POOLINGS", "PredictSection"]
