"""Ray stages (vocabulary, examples, pretraining, fine-tuning) and the end-to-end DAG."""
