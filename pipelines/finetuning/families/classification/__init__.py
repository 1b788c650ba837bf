"""Classification of a text or text pair (a table's label column, or the embedded BBC News
articles): its metrics (metrics.py) and fine-tuning on it (training.py, over _sequence/)."""
