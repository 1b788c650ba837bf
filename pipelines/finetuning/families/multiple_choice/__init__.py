"""Multiple choice (SWAG, RACE, or any question with a fixed number of answers): its files
(reading.py), fine-tuning on it (training.py: a score per choice, the choices of a question in one
softmax, accuracy) and its use on unlabelled questions (inference.py)."""

from ...family import Family

FAMILY = Family(
    name="multiple_choice",
    metrics=("accuracy",),
    architecture="AlbertForMultipleChoice",
    outputs=("logits",),
    training=f"{__name__}.training:MULTIPLE_CHOICE",
    keys=("label_column", "context_column", "question_column", "choices_column"),
    choices=True,
    inference=f"{__name__}.inference:INFERENCE",
)
