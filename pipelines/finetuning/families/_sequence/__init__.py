"""What the three sequence families (classification, regression, multi-label: a label per text or
text pair, read from [CLS]) share; not a family of its own (its name starts with `_`): their head
and its output, the finetune keys they all read, and their fine-tuning (training.py, which each
family's folder subclasses, over task.py's reading of a table)."""

ARCHITECTURE = "AlbertForSequenceClassification"
OUTPUTS = ("logits",)
"""Its logits are a sequence family's scores whatever the labels are (one class, several, a number)."""
KEYS = ("text_column", "text_pair_column", "label_column", "classifier_dropout", "column_names")
"""A table's columns and the dropout before the classifier: read by every sequence family, by no other."""
