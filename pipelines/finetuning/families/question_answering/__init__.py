"""Extractive question answering (SQuAD v1.1 and v2.0): its files (reading.py), a question's
doc-stride windows (features.py), the answer search over them (postprocess.py), the official
script's scores (metrics.py), the embedded cloze task (demo.py), fine-tuning on it (training.py),
and its exports applied to new questions (inference.py)."""

from ....config import FinetuneSection
from ...family import Family


def _window_holds_context(cfg: FinetuneSection) -> None:
    cfg.require(
        "max_query_length",
        cfg.max_query_length + 4 <= cfg.max_seq_length,
        f"leaves no context in a window of finetune.max_seq_length={cfg.max_seq_length} "
        "([CLS] question [SEP] context [SEP]): use at most max_seq_length - 4",
    )


FAMILY = Family(
    name="question_answering",
    metrics=("f1", "exact"),
    architecture="AlbertForQuestionAnswering",
    outputs=("start_logits", "end_logits"),
    training=f"{__name__}.training:QUESTION_ANSWERING",
    inference=f"{__name__}.inference:INFERENCE",
    keys=("max_query_length", "doc_stride", "n_best_size", "max_answer_length"),
    check=_window_holds_context,
)
