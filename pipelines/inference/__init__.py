"""A fine-tuned export applied to rows, free of Ray: loading it (predictor.py) and reading tables in
streamed batches that keep each row's place (reading.py)."""
