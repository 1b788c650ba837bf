"""Acceptance 3 of issue #4 (the MLM half) and acceptance 2 of issue #5: on the embedded corpus the
tiny preset learns within a few CPU minutes (configs/learning-tiny.yaml), and the encoder it
leaves fine-tunes better on BBC News than the same architecture from a random initialisation under
the same fine-tuning budget; it also learns the embedded question-answering demo task, and
transformers answers with the exported model as the run's predictions say. Measured curves,
accuracies and F1: docs/BENCHMARKS.md.

SOP accuracy stays at the majority share in this budget: not asserted (see BENCHMARKS); that the
SOP labels and head train when the order is learnable is tested in train/test_sop_learns.py.
"""

import json
from pathlib import Path

import pytest
import torch
import transformers

from bench.pretraining_robust import BUDGETS
from pipelines.config import load_config
from pipelines.finetuning.families.question_answering.demo import bbc_qa_examples
from pipelines.finetuning.families.question_answering.features import qa_windows
from pipelines.finetuning.families.question_answering.postprocess import postprocess
from pipelines.finetuning.tokenizer import PairTokenizer, pad_batch
from pipelines.stages.finetune import run_finetune
from pipelines.stages.pretrain import run_pretrain
from tests.albert_model.test_qa_head import answer_with_transformers

from .runs import LEARNING_RECIPE, copy_inputs

pytestmark = [pytest.mark.slow, pytest.mark.learning]

# The fine-tuning budget both arms get: one trial, fixed hyperparameters, one epoch at lr 3e-4, where
# a random initialisation has not yet left the majority class and the pretrained encoder has. With
# two epochs at lr 1e-3 the margin swung from -0.11 to +0.17 with the pretraining data's order and
# the precision (same masked-LM accuracy); here it was +0.19 to +0.31 (docs/BENCHMARKS.md).
# bench/pretraining_robust.py measures the same budgets over data orders and seeds.
FINETUNE_BUDGET = BUDGETS["bbc"]


@pytest.fixture(scope="module")
def pretrained_run(embedded_run, tmp_path_factory, request):
    """The recipe's pretraining, on a copy of the session's vocabulary and examples of the recipe;
    `--learning-train-seed` draws another data order (and initialisation, and masks)."""
    run_dir = copy_inputs(embedded_run, tmp_path_factory.mktemp("learning") / "run")
    seed = request.config.getoption("--learning-train-seed")
    order = [] if seed is None else [f"train.seed={seed}"]
    run_pretrain(load_config(LEARNING_RECIPE, [f"run_dir={run_dir}", "train.max_failures=0", *order]))
    return run_dir


def test_tiny_preset_learns_masked_lm(pretrained_run):
    lines = [json.loads(x) for x in Path(pretrained_run, "pretrain", "metrics.jsonl").read_text().splitlines()]
    curve = [r for r in lines if r.get("split") == "validation"]
    first, last = curve[0], curve[-1]
    assert (first["step"], last["step"], last["sequences"]) == (500, 3000, 512)
    # chance is 1/8000 and the unigram plateau 0.069; measured (pyarrow input, 5cfa0f4): 0.092 at
    # step 500, 0.132 at 3000 (MLM loss 6.08); with Ray Data's reader before: 0.093, 0.134; on the
    # data orders train.seed=42, 7, 1234: 0.133, 0.130, 0.133 at 3000 (bench/pretraining_robust.py)
    assert last["mlm_accuracy"] >= 0.11, curve
    assert last["mlm_accuracy"] >= first["mlm_accuracy"] + 0.02, curve
    assert last["mlm_loss"] <= first["mlm_loss"] - 0.25, curve
    # issue #17, acceptance 4: the recipe leaves the plateau, so no warning (checked at step 1,500:
    # warm-up 100 + train.health.plateau_after_steps 1,000, at the next validation pass)
    health = [r for r in lines if r.get("event") not in (None, "started")]
    assert not [r for r in health if r["event"] == "plateau"], health
    assert [r["event"] for r in health] in ([], ["note"]), health  # the note: SOP still at chance, as expected


def test_pretraining_beats_random_initialisation_on_bbc(pretrained_run, tmp_path):
    accuracy = {}
    for init in ("pretrained", "random"):
        config = load_config(
            None,
            [
                f"run_dir={tmp_path}/{init}",
                f"finetune.pretrained={pretrained_run}/pretrain/hf",
                f"finetune.init={init}",
                *FINETUNE_BUDGET,
            ],
        )
        best = json.loads(Path(run_finetune(config), "best.json").read_text())
        assert best["eval_examples"] == 446
        accuracy[init] = best["value"]
    # What holds across data orders and seeds (bench/pretraining_robust.py, docs/BENCHMARKS.md): over
    # 3 orders x 3 fine-tuning seeds the pretrained arm scored 0.390-0.572 and the random one 0.229
    # (the majority class) every time, a difference of +0.161 at least (mean +0.263, 95% interval
    # +0.214..+0.311). The test passes with --learning-train-seed 7 and 1234 too.
    assert accuracy["pretrained"] >= accuracy["random"] + 0.1, accuracy


# Question answering's budget: one trial on 1,000 of the demo's cloze questions, two epochs.
QA_BUDGET = BUDGETS["qa"]
QA_MIN_F1 = 6.0


def test_the_pretrained_model_learns_the_question_answering_demo(pretrained_run, tmp_path):
    config = load_config(None, [f"run_dir={tmp_path}", f"finetune.pretrained={pretrained_run}/pretrain/hf", *QA_BUDGET])
    out = Path(run_finetune(config))
    best = json.loads((out / "best.json").read_text())
    predictions = json.loads((out / "predictions.json").read_text())
    assert best["eval_examples"] == len(predictions) == 300
    # no-answer baseline: F1 0 (every demo question has an answer); an untrained head 1.4-3.2;
    # measured with make run's encoder: 11.4 (random initialisation 10.3), docs/BENCHMARKS.md. Over 3
    # data orders x 3 seeds the pretrained arm scored 9.8-13.1 and a random start 10.3-11.4: this
    # asserts that the task is learned and exported, not that pretraining helps (it does not, here)
    assert best["metrics"]["f1"] >= QA_MIN_F1, best["metrics"]

    assert_transformers_answers_as_the_run(out, config.finetune, predictions)


def assert_transformers_answers_as_the_run(out: Path, cfg, predictions: dict[str, str], n: int = 40) -> None:
    """transformers loads the export, and its logits on the run's features, through the run's
    post-processing, give the answers in predictions.json (one near-tie allowed in `n` questions);
    its own one-window decoding (the removed pipeline's) answers with a span of the context."""
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(out / "best").eval()
    tokenizer = PairTokenizer(str(out / "best"))
    examples = [e for e in bbc_qa_examples(seed=0) if e.id in predictions][:n]
    features = [
        f for e in examples for f in qa_windows(tokenizer, e, cfg.max_seq_length, cfg.max_query_length, cfg.doc_stride)
    ]
    batch = pad_batch([(f.input_ids, f.token_type_ids) for f in features], tokenizer.pad_id)
    with torch.no_grad():
        logits = model(**{k: torch.from_numpy(v) for k, v in batch.items()})
    theirs = postprocess(
        {e.id: e.context for e in examples},
        [f.window for f in features],
        logits.start_logits.numpy(),
        logits.end_logits.numpy(),
        cfg.n_best_size,
        cfg.max_answer_length,
    ).answers
    same = sum(theirs[e.id] == predictions[e.id] for e in examples)
    assert len(examples) == n and same >= n - 1, [(theirs[e.id], predictions[e.id]) for e in examples]
    short = next(e for e in examples if len(e.context) <= 600)
    answer = answer_with_transformers(out / "best", short.question, short.context, cfg.max_answer_length)
    assert answer["answer"] and answer["answer"] == short.context[answer["start"] : answer["end"]]
