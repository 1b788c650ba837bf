"""The end of pretraining on rank 0: eval.json and the model in transformers' format.

config.json names the sentence objective the model was pretrained with (`sentence_objective`: sop,
nsp or none); without one, a README.md beside it says that the sentence head and the pooler were
not trained."""

from __future__ import annotations

import json
import os
import tempfile

from albert_model import AlbertForPreTraining
from albert_model.hf import save_hf_pretrained

from ..storage import join, read_bytes, write_bytes, write_text
from .plan import PretrainPlan

UNTRAINED_HEAD_README = """# ALBERT pretrained without a sentence objective

This model was pretrained with the masked-LM loss alone (`data.sentence_objective=none`): each
example was one segment, `[CLS] text [SEP]`, all token types 0. The sentence head
(`sop_classifier`) and the pooler (`albert.pooler`), which only that head reads, were not trained:
they hold their random initialisation, so `sop_logits` mean nothing, and a classifier fine-tuned on
the pooled output trains the pooler from that start. config.json records it as
`"sentence_objective": "none"`.
"""


def export(plan: PretrainPlan, state: dict, final: dict) -> None:
    """Rank 0: eval.json and hf/ (written locally, then copied to the run's storage)."""
    write_text(join(plan.out_dir, "eval.json"), json.dumps(final, indent=2) + "\n")
    model = AlbertForPreTraining(plan.albert)
    model.load_state_dict(state)
    with tempfile.TemporaryDirectory() as tmp:
        spiece = None
        if plan.spiece_model:
            spiece = os.path.join(tmp, "spiece.model")
            with open(spiece, "wb") as f:
                f.write(read_bytes(plan.spiece_model))
        folder = save_hf_pretrained(
            model,
            os.path.join(tmp, "hf"),
            spiece_model=spiece,
            max_seq_length=plan.max_seq_length,
            extra_config={"sentence_objective": plan.sentence_objective},
        )
        if plan.sentence_objective == "none":
            with open(os.path.join(folder, "README.md"), "w") as f:
                f.write(UNTRAINED_HEAD_README)
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                write_bytes(join(plan.out_dir, "hf", name), f.read())


__all__ = ["export"]
