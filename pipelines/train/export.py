"""The end of pretraining on rank 0: eval.json and the model in transformers' format."""

from __future__ import annotations

import json
import os
import tempfile

from albert_model import AlbertForPreTraining
from albert_model.hf import save_hf_pretrained

from ..storage import join, read_bytes, write_bytes, write_text
from .plan import PretrainPlan


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
        folder = save_hf_pretrained(model, os.path.join(tmp, "hf"), spiece_model=spiece)
        for name in sorted(os.listdir(folder)):
            with open(os.path.join(folder, name), "rb") as f:
                write_bytes(join(plan.out_dir, "hf", name), f.read())


__all__ = ["export"]
