"""Multiple choice (SWAG, RACE, or any question with a fixed number of answers): its files
(reading.py) and fine-tuning on it (training.py: a score per choice, the choices of a question in one
softmax, accuracy)."""
