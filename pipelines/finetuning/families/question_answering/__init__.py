"""Extractive question answering (SQuAD v1.1 and v2.0): its files (reading.py), a question's
doc-stride windows (features.py), the answer search over them (postprocess.py), the official
script's scores (metrics.py), the embedded cloze task (demo.py), and fine-tuning on it (training.py)."""
