"""`albert-ray distill`: a shallower student of the fine-tuned model (distill.layers applications
of its shared layer, from its own weights), trained on the task's training rows against the
teacher's outputs (computed once, here), searched by Ray Tune as fine-tuning is (its search, its
trials, its export: pipelines/stages/finetune.py's search_task), exported under distill/best/ with
distill/best.json and trials.csv as finetune's; then distill/tradeoff.json: the teacher, the student
and the teacher under early exit scored and timed on the same eval rows (finetuning/tradeoff.py)."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import torch

from albert_model.hf import load_hf_pretrained

from ..config import Config
from ..finetuning.distill import Teacher, student_depth, teacher_scores
from ..finetuning.families import FAMILIES, task_family
from ..finetuning.tradeoff import Arm, measure
from ..finetuning.trial import TrialData
from ..inference.predictor import exit_rule_of
from ..rundir.lifecycle import StageRun, stage_runner
from ..rundir.registry import stage_dir
from ..storage import join, write_text
from ..storage.models import materialize, read_model_files
from .finetune import search_task

TRADEOFF_FILE = "tradeoff.json"


def teacher_dir(config) -> str:
    """distill.teacher, or the finetune stage's best model."""
    return config.distill.teacher or join(stage_dir(config, "finetune"), "best")


def build_distill(run: StageRun) -> dict:
    """trials.csv, best.json and best/ (the student) in the stage's folder; the manifest's fields."""
    config = run.config
    teacher = teacher_dir(config)
    family = task_family(config.finetune.task)
    taught: list[TrialData] = []

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
        taught.append(data)
        metrics = family.evaluate(config.finetune, data.encoded, scores).metrics
        print(f"distill: a student of {layers} of the teacher's {depth} layers ({teacher})", flush=True)
        return {"teacher": {"model": teacher, "num_hidden_layers": depth, "metrics": metrics}, "student_layers": layers}

    fields = search_task(
        config,
        run.out,
        run.current,
        join(run.scratch, "tune"),
        run.resumed,
        name="distill",
        source=(teacher, "distill.teacher"),
        teach=teach,
    )
    tradeoff = measure_tradeoff(config, taught[0], join(run.out, "best"))
    write_text(join(run.out, TRADEOFF_FILE), json.dumps(tradeoff, indent=2) + "\n")
    return {**fields, "tradeoff": tradeoff}


def measure_tradeoff(config: Config, data: TrialData, student: str) -> dict[str, Any]:
    """The teacher, the student (its folder `student`) and the teacher under each of distill's exit
    settings that can stop before its last depth (a sequence family's), scored and timed on the
    task's eval features on this process's CPU threads (finetuning/tradeoff.py)."""
    family = FAMILIES[config.finetune.task]
    training = family.load_training()
    settings = config.distill
    with tempfile.TemporaryDirectory() as local:
        teacher_folder = materialize(data.pretrained_files, os.path.join(local, "teacher"))
        student_folder = materialize(read_model_files(student, "distill/best"), os.path.join(local, "student"))
        teacher = load_hf_pretrained(teacher_folder, training.model_class)
        pupil = load_hf_pretrained(student_folder, training.model_class)
    depth, layers = teacher.config.num_hidden_layers, pupil.config.num_hidden_layers
    arms = [Arm("teacher", teacher.eval(), depth), Arm("student", pupil.eval(), layers)]
    inference = family.load_inference()
    if getattr(inference, "exit_rule", None) is not None:
        rules = [(f"exit, patience {p}", p, None) for p in settings.exit_patiences if p < depth - 1]
        rules += [(f"exit, entropy < {e:g}", None, e) for e in settings.exit_entropies]
        for name, patience, entropy in rules:
            rule = exit_rule_of(family, inference, patience, entropy, "distill", False)
            arms.append(Arm(name, teacher, depth, rule))
    found = measure(config.finetune, training, data.encoded, data.pad_id, arms)
    print(f"distill: the trade-off of {len(arms)} ways of answering measured on {len(data.encoded.eval)} eval rows")
    return {"threads": torch.get_num_threads(), "eval_rows": len(data.encoded.eval), "arms": found}


run_distill = stage_runner("distill")
