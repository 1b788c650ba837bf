"""Multi-label classification of a text or text pair (any number of classes per row): its label
sets (labels.py), its metrics (metrics.py) and fine-tuning on it (training.py, over _sequence/)."""
