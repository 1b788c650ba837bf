"""The extractive question-answering family (SQuAD v1.1 and v2.0), as ALBERT's run_squad and
transformers' run_qa do it: `[CLS] question [SEP] window [SEP]` features over doc-stride windows
(features.py), a start/end head at every position (transformers' AlbertForQuestionAnswering), the
loss the mean of the start and end cross-entropies, and evaluation by n-best post-processing over a
question's windows (postprocess.py) and the official script's exact and F1 (metrics.py).

For SQuAD v2.0 (a file that says so, or any unanswerable question) the no-answer threshold is the
one with the best F1 on the eval set (the official script's `best_f1_thresh`), chosen at every
evaluation and recorded as `null_threshold`, moved off the eval question's odds it equals
(clear_threshold); `predictions.json` answers "" where a question's null odds exceed it, so its
exact and F1 are the reported ones."""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ...distill_losses import span_kl_sum
from ...family import Baseline, EncodedTask, Evaluation
from ...loop import collate
from ...splits import Units, train_and_eval
from ...tables import BBC_NEWS, seeded_hash
from ...tokenizer import PairTokenizer
from . import FAMILY
from .demo import bbc_qa_examples
from .features import QAExample, QAFeature, RejectedExample, qa_windows
from .metrics import squad_scores
from .postprocess import Window, postprocess
from .reading import QAReadResult, golds_of, read_qa_file

DEMO = f"{BBC_NEWS} (cloze questions)"
"""The embedded task's source name: demo.py's questions from the BBC News articles (seed 0)."""
REPORTED = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1")


def reported(golds: Mapping[str, Sequence[str]], answers: Mapping[str, str]) -> dict[str, float]:
    """The official script's scores the family reports (REPORTED, those that apply) of `answers`."""
    scored = squad_scores(golds, answers)
    return {k: float(scored[k]) for k in REPORTED if k in scored}


@dataclass(frozen=True)
class QAReference:
    """What a QA evaluation reads besides the logits: each eval feature's window, the questions'
    contexts and gold answers, and whether no-answers are predicted (v2)."""

    windows: tuple[Window, ...]
    contexts: dict[str, str]
    golds: dict[str, list[str]]
    version_2: bool


def _featurize(source: QAReadResult, tokenizer: PairTokenizer, cfg: FinetuneSection) -> dict[str, list[QAFeature]]:
    """Each usable question's windows, by id; a question the tokenizer finds unusable is moved from
    the source's examples to its rejections (counted under its reason, named by its id)."""
    features, kept = {}, []
    for example in source.examples:
        try:
            features[example.id] = qa_windows(
                tokenizer, example, cfg.max_seq_length, cfg.max_query_length, cfg.doc_stride
            )
        except RejectedExample as e:
            source.reject(f"id {example.id!r}", e.reason, str(e))
            continue
        kept.append(example)
    source.examples = kept
    return features


def split_by_context(examples: Sequence[QAExample], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """The (train, eval) indices of a seeded split with `fraction` of the distinct contexts in eval:
    the questions on one context stay on one side, so no eval context was read in training."""
    contexts = sorted({e.context for e in examples}, key=lambda c: seeded_hash(seed, "split", c))
    held = set(contexts[: round(fraction * len(contexts))])
    train = [i for i, e in enumerate(examples) if e.context not in held]
    return train, [i for i, e in enumerate(examples) if e.context in held]


def sample_questions(examples: Sequence[QAExample], k: int, seed: int) -> list[int]:
    """The indices, in order, of a seeded subsample of `k` questions."""
    return sorted(sorted(range(len(examples)), key=lambda i: seeded_hash(seed, "sample", examples[i].id))[:k])


def clear_threshold(threshold: float, odds: Collection[float]) -> float:
    """The official script's threshold is a question's own null odds, which that question's answer
    then turns on by the last bits of its logits (onnxruntime's, or transformers' float32 sums, round
    otherwise): moved halfway to the next odds above it (one logit up where none is), it answers the
    same eval questions, clear of each."""
    if threshold not in odds:
        return threshold
    above = [o for o in odds if threshold < o < math.inf]
    return (threshold + min(above)) / 2 if above else threshold + 1.0


class QuestionAnsweringFamily:
    model_class = FAMILY.model_class
    problem_type = None
    target_dtype = torch.long
    collate = staticmethod(collate)  # a window is one padded sequence; targets are (start, end) rows
    targets_by_position = False

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        features: dict[str, list[QAFeature]] = {}

        def featurized(source: QAReadResult) -> QAReadResult:
            features.update(_featurize(source, tokenizer, cfg))
            return source

        splits = train_and_eval(
            cfg,
            Units(
                read=lambda path: featurized(read_qa_file(path)),
                held_out=lambda source, fraction, seed: split_by_context(source.examples, fraction, seed),
                sample=lambda chosen, k, seed: sample_questions(chosen.examples, k, seed),
                unit="questions",
                held_out_as="{fraction:g} of {source} by context (seed {seed})",
                embedded=lambda: featurized(QAReadResult(DEMO, examples=bbc_qa_examples(seed=0))),
                too_few=lambda source: f"{len({e.context for e in source.examples})} contexts",
            ),
        )
        train, evaluation = splits.train.examples, splits.evaluation.examples
        train_features = [f for e in train for f in features[e.id]]
        eval_features = [f for e in evaluation for f in features[e.id]]
        version_2 = any(s.version_2 for s in splits.sources) or any(not e.answers for e in (*train, *evaluation))

        def targets(chosen: list[QAFeature]) -> np.ndarray:
            return np.asarray([(f.start_position, f.end_position) for f in chosen], np.int64).reshape(-1, 2)

        return EncodedTask(
            train=[(f.input_ids, f.token_type_ids) for f in train_features],
            train_targets=targets(train_features),
            eval=[(f.input_ids, f.token_type_ids) for f in eval_features],
            eval_targets=targets(eval_features),
            reference=QAReference(
                tuple(f.window for f in eval_features),
                {e.id: e.context for e in evaluation},
                golds_of(evaluation),
                version_2,
            ),
            accounting={
                **splits.accounting,
                "train": {**splits.accounting["train"], "features": len(train_features)},
                "eval": {**splits.accounting["eval"], "features": len(eval_features)},
                "version_2": version_2,
            },
            truncated={
                "questions": sum(
                    len(tokenizer.pieces(e.question)) > cfg.max_query_length for e in (*train, *evaluation)
                ),
                # answerable training questions whose answer no window holds whole: every window of
                # theirs is trained towards [CLS], as in run_squad
                "answers_outside_windows": sum(
                    bool(e.answers) and all(f.start_position == 0 for f in features[e.id]) for e in train
                ),
            },
            eval_examples=len(evaluation),
        )

    def loss_sum(self, outputs: Any, targets: torch.Tensor) -> torch.Tensor:
        start = F.cross_entropy(outputs.start_logits.float(), targets[:, 0], reduction="sum")
        end = F.cross_entropy(outputs.end_logits.float(), targets[:, 1], reduction="sum")
        return (start + end) / 2

    def soft_loss_sum(
        self, outputs: Any, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        """(KL(start) + KL(end)) / 2 to the teacher's [B, S, 2] logits, each over a window's own tokens
        (the teacher's are -inf past them: distill.packed_targets): every position a target can be
        at, as the hard loss's softmax spans, without the batch's padding (as eval_loss leaves it
        out). Summed over the windows, as loss_sum."""
        width = outputs.start_logits.shape[1]  # the batch's: past it every window's padding
        start = span_kl_sum(outputs.start_logits, teacher[:, :width, 0], temperature)
        end = span_kl_sum(outputs.end_logits, teacher[:, :width, 1], temperature)
        return (start + end) / 2

    def scores(self, outputs: Any) -> torch.Tensor:
        return torch.stack([outputs.start_logits, outputs.end_logits], dim=-1)  # (B, S, 2)

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        ref: QAReference = task.reference
        start, end = scores[..., 0], scores[..., 1]
        predicted = postprocess(
            ref.contexts, ref.windows, start, end, cfg.n_best_size, cfg.max_answer_length, version_2=False
        )
        metrics: dict[str, float] = {"eval_loss": _eval_loss(scores, task.eval_targets, ref.windows)}
        answers = predicted.answers
        files = {}
        threshold = None  # SQuAD v1.1: every question is answered
        if ref.version_2:
            searched = squad_scores(ref.golds, answers, na_probs=predicted.null_odds)
            threshold = clear_threshold(float(searched["best_f1_thresh"]), predicted.null_odds.values())
            answers = {q: "" if predicted.null_odds[q] > threshold else a for q, a in answers.items()}
            metrics["null_threshold"] = threshold
            files["null_odds.json"] = json.dumps(predicted.null_odds, indent=1, sort_keys=True) + "\n"
        metrics.update(reported(ref.golds, answers))
        files["predictions.json"] = json.dumps(answers, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        usage = {
            "max_query_length": cfg.max_query_length,
            "doc_stride": cfg.doc_stride,
            "n_best_size": cfg.n_best_size,
            "max_answer_length": cfg.max_answer_length,
            "null_threshold": threshold,
        }
        return Evaluation(metrics, files, usage)

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        ref: QAReference = task.reference
        metrics = reported(ref.golds, dict.fromkeys(ref.golds, ""))
        return Baseline("no answer to any question (SQuAD's no-answer baseline)", metrics)


def _eval_loss(scores: np.ndarray, targets: np.ndarray, windows: Sequence[Window]) -> float:
    """The training loss's mean over the eval features: each feature's start and end cross-entropy
    over its own tokens (not the batch's padding)."""
    if not len(scores):
        return 0.0
    lengths = np.asarray([len(w.offsets) for w in windows])
    logits = np.where(np.arange(scores.shape[1])[None, :, None] < lengths[:, None, None], scores, -np.inf)
    logits = logits.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    rows = np.arange(len(scores))
    picked = log_probs[rows, targets[:, 0], 0] + log_probs[rows, targets[:, 1], 1]
    return float(-picked.mean() / 2)


QUESTION_ANSWERING = QuestionAnsweringFamily()

__all__ = [
    "DEMO",
    "QUESTION_ANSWERING",
    "QAReference",
    "QuestionAnsweringFamily",
    "sample_questions",
    "split_by_context",
]
