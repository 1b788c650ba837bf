"""What a task family's inference is (issue #44): how an unlabelled input row becomes features and how
the model's outputs become its prediction, so that the generic machinery (predict's Ray Data actor,
serve's replica, the parity paths) reads rows, calls the family, batches its features with the
family's training `collate`, runs the model and calls the family again, knowing nothing of any
family. A family's folder holds it as `inference.py` exporting `INFERENCE`, which its declaration
names (`Family(inference=...)`, loaded with `Family.load_inference()`).

Besides the protocol, an INFERENCE may have these, each optional (the generic side reads them with
`getattr`: pipelines/inference/table_files.py, pipelines/stages/predict.py):
- `file_suffixes: tuple[str, ...]`: the endings (lowercase; a `.gz` after one is allowed too) of
  the files `read_file` may read; predict hands it only those, so a family's own format (SQuAD
  JSON, CoNLL) is read whole while a table of any size streams. Absent: `read_file` is never called.
- `files(results) -> {name: text}`: the files predict writes beside its parquet when some input
  was read by `read_file` (SQuAD's predictions.json), from predict's output rows (`id`, the `output`
  columns, `label`, `rejected`), every row once, in any order.
- `metrics(labels, predictions, use, section) -> dict`: the fine-tuning's metrics on rows with a
  gold label (predict.label_column: `labels[i]` the cell as read, `predictions[i]` the output dict,
  `section` the PredictSection): predict's manifest `metrics`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import pyarrow as pa

    from .tokenizer import PairTokenizer


@dataclass(frozen=True)
class ModelUse:
    """What applying an export needs, read once from its folder (pipelines/storage/models.py)."""

    tokenizer: PairTokenizer
    """pipelines/finetuning/tokenizer.py, from the folder."""
    max_seq_length: int
    """applied_length(): explicit setting > the folder's albert_ray record > its tokenizer's
    model_max_length > fallback."""
    label_names: list[str] | None
    """config.json id2label in id order."""
    settings: Mapping[str, Any]
    """The albert_ray record's other keys (QA: max_query_length, doc_stride, n_best_size,
    max_answer_length, null_threshold; NER: tag_scheme, word_start)."""
    problem_type: str | None
    """config.json problem_type."""


@dataclass
class Encoded:
    features: list[Any]
    """Model inputs, each as the family's training `collate` takes a feature (sequence/NER/QA:
    (input_ids, token_type_ids); multiple choice: a tuple of those per choice)."""
    owners: list[int]
    """features[i] belongs to rows[owners[i]] (QA and long NER texts: several windows per row)."""
    extra: Any = None
    """What `predictions` needs besides the outputs (QA: each window's offsets; NER: word starts)."""
    rejected: dict[int, str] = field(default_factory=dict)
    """Rows (by index) that only encoding finds unusable, with their reason (QA: a question or
    context of nothing the tokenizer keeps): they have no features, `predictions` gives them null
    outputs, and predict and serve reject them under that reason."""


class FamilyInference(Protocol):
    fields: tuple[str, ...]
    """The fields of one input row (predict's columns, serve's request object), e.g. ("text",
    "text_pair"), ("question", "context"), ("tokens",) or ("text",) for NER, ("question", "context",
    "choices")."""
    required: tuple[str, ...]
    """Of `fields`, those a row must have (the others may be absent/null)."""
    output: dict[str, pa.DataType]
    """predict's output columns besides id/label/rejected, in order (also the keys of serve's
    response objects)."""

    def check_row(self, row: Mapping[str, Any]) -> str | None:
        """None when the row can be predicted, else the reason it is rejected (one of missing_text,
        not_a_string, empty_text, empty_text_pair, ... a short snake_case word the family
        documents); never raises."""
        ...

    def encode(self, rows: Sequence[Mapping[str, Any]], use: ModelUse) -> Encoded:
        """The checked rows' features (windowed where a row is longer than use.max_seq_length)."""
        ...

    def predictions(
        self, rows: Sequence[Mapping[str, Any]], encoded: Encoded, outputs: Any, use: ModelUse
    ) -> list[dict[str, Any]]:
        """One dict per row (keys = `output`), from the model's outputs for encoded.features in
        order: `outputs` is what the family's training `scores(model(**collate(features)))` returns,
        as numpy, concatenated over batches along dim 0 (padded along dim 1 to the widest batch, as
        evaluation gets it)."""
        ...

    def read_file(self, path: str, data: bytes) -> list[dict[str, Any]] | None:
        """Rows of a family-specific input file (QA: SQuAD JSON -> question/context rows with `id`;
        NER: a CoNLL file -> tokens rows), or None when `path` is not such a file (then predict
        reads it as a table). `data` is the file's bytes as stored (a `.gz` one compressed); a row
        may carry an `id` and a gold `label` besides its fields."""
        ...


__all__ = ["Encoded", "FamilyInference", "ModelUse"]
