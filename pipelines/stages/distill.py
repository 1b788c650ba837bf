"""`albert-ray distill`: a shallower student of the fine-tuned model (distill.layers applications
of its shared layer, from its own weights), trained on the task's training rows against the
teacher's outputs (computed once, here), searched by Ray Tune as fine-tuning is (its search, its
trials, its export: pipelines/stages/finetune.py's search_task), exported under distill/best/ with
distill/best.json and trials.csv as finetune's."""

from __future__ import annotations

import json
import tempfile
from typing import Any

from ..finetuning.distill import Teacher, student_depth, teacher_scores
from ..finetuning.families import task_family
from ..finetuning.trial import TrialData
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import stage_dir
from ..storage import join
from ..storage.models import materialize
from .finetune import search_task


def teacher_dir(config) -> str:
    """distill.teacher, or the finetune stage's best model."""
    return config.distill.teacher or join(stage_dir(config, "finetune"), "best")


def build_distill(run: StageRun) -> dict:
    """trials.csv, best.json and best/ (the student) in the stage's folder; the manifest's fields."""
    config = run.config
    teacher = teacher_dir(config)
    family = task_family(config.finetune.task)

    def teach(data: TrialData) -> dict[str, Any]:
        """The teacher's logits on the training features for the trials, and its scores on the same
        eval features as the student's (best.json's `teacher`)."""
        settings = config.distill
        layers, depth = student_depth(settings, json.loads(data.pretrained_files["config.json"]), teacher)
        with tempfile.TemporaryDirectory() as local:
            folder = materialize(data.pretrained_files, local)
            logits = teacher_scores(config.finetune, family, data.encoded.train, data.pad_id, folder)
            scores = teacher_scores(config.finetune, family, data.encoded.eval, data.pad_id, folder)
        data.teacher = Teacher(logits, layers, depth, settings)
        metrics = family.evaluate(config.finetune, data.encoded, scores).metrics
        print(f"distill: a student of {layers} layers from the teacher's {depth} ({teacher})", flush=True)
        return {"teacher": {"model": teacher, "num_hidden_layers": depth, "metrics": metrics}, "student_layers": layers}

    return search_task(
        config,
        run.out,
        run.current,
        join(run.scratch, "tune"),
        run.resumed,
        name="distill",
        source=(teacher, "distill.teacher"),
        teach=teach,
    )


run_distill = stage_runner("distill")
