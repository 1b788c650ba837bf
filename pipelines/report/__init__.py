"""The report stage: report.md with data statistics, pretraining curves, the paper's Figure 1, the
fine-tuning search and each stage's cost (stage.py; pure pieces in markdown.py, layers.py, plots.py)."""
