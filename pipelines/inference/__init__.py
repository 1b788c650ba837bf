"""A fine-tuned export applied to rows by its task family, free of Ray: the family and the model
loaded and run (predictor.py), where a table's columns hold a row's fields (columns.py), listing an
input's files and checking them before any is read (table_files.py), reading tables in streamed
batches that keep each row's place and say why a row cannot be predicted (reading.py), and a serve
request's rows checked (request.py)."""
