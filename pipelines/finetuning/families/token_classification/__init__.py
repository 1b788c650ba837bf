"""Token classification (named entities, chunks, parts of speech: a tag per word): its files
(reading.py: CoNLL, or jsonl/parquet token and tag lists), conlleval's scores (metrics.py), and
fine-tuning on it (training.py)."""
