"""Regression of a number from a text or text pair (a table's numeric label column): its metrics
(metrics.py) and fine-tuning on it (training.py, over _sequence/)."""
