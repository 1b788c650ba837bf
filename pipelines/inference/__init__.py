"""A fine-tuned export applied to rows, free of Ray: loading it (predictor.py), listing an input's
table files and checking their columns before any is read (table_files.py), and reading tables in
streamed batches that keep each row's place and say why a row cannot be predicted (reading.py)."""
