"""Token classification (named entities, chunks, parts of speech: a tag per word): its files
(reading.py: CoNLL, or jsonl/parquet token and tag lists), conlleval's scores (metrics.py),
fine-tuning on it (training.py) and applying its exports to words or raw text (inference.py)."""

from ...family import Family

FAMILY = Family(
    name="token_classification",
    metrics=("f1", "precision", "recall", "accuracy"),
    architecture="AlbertForTokenClassification",
    outputs=("logits",),
    training=f"{__name__}.training:TOKEN_CLASSIFICATION",
    inference=f"{__name__}.inference:INFERENCE",
    keys=("tokens_column", "tags_column", "conll_tag_column"),
)
