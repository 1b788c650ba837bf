"""Fine-tuning's pure pieces (no Ray): tables and labels, tokenization, metrics, the epoch loop."""
