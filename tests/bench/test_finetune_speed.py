"""The fine-tuning step benchmark runs end to end (as a script and as bench/gpu_suite.py's phase)
and times the same work for ours and transformers' Trainer (numbers are recorded in docs/, never
asserted)."""

import argparse
import json
from pathlib import Path

import pytest
import torch

from albert_model import AlbertConfig
from pipelines.finetuning.families import FAMILIES

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs beside bench/'s other modules
    import finetune_speed

    return finetune_speed


def test_cpu_smoke_run_times_ours_and_the_trainer_step(bench, tmp_path):
    out = tmp_path / "result.json"
    results = bench.main(["--device", "cpu", "--finetune-configs", "tiny-32:2", "--json", str(out)])
    assert json.loads(out.read_text()) == results
    assert list(results) == ["tiny-32:2/full", "tiny-32:2/padded"]
    for r in results.values():
        assert "error" not in r, r
        assert {k for k, v in r.items() if isinstance(v, dict)} == {"ours", "transformers"}  # no compile on CPU
        assert r["precision"] == "fp32"
        for name in ("ours", "transformers"):
            assert len(r[name]["step_ms_rounds"]) == 1 and r[name]["sequences_per_s"] > 0
        assert r["speedup"] == pytest.approx(r["ours"]["sequences_per_s"] / r["transformers"]["sequences_per_s"])
    full, padded = results["tiny-32:2/full"], results["tiny-32:2/padded"]
    assert full["width"] == 32 and full["real_tokens"] == 64
    assert 16 <= padded["width"] <= 32 and padded["real_tokens"] < 64
    assert "| tiny-32:2 | padded |" in bench.table(results)


def test_gpu_suite_options_and_defaults(bench):
    suite = argparse.ArgumentParser()  # the options bench/gpu_suite.py already has
    for name, default in (("--warmup", 3), ("--steps", 5), ("--rounds", 3)):
        suite.add_argument(name, type=int, default=default)
    suite.add_argument("--device", default="cuda")
    bench.add_arguments(suite)
    args = suite.parse_args([])
    assert args.finetune_configs is None  # the phase then takes the device's default sizes
    assert args.finetune_padding == "full,padded" and args.finetune_compile is True
    assert not suite.parse_args(["--no-finetune-compile"]).finetune_compile
    assert args.finetune_graphs is True and not suite.parse_args(["--no-finetune-graphs"]).finetune_graphs


def test_batches_are_full_or_padded_within_half_to_full_length(bench):
    full = bench.make_batch(8, 64, 500, padded=False, pin=False)
    padded = bench.make_batch(8, 64, 500, padded=True, pin=False)
    assert full["attention_mask"].all() and full["input_ids"].shape == (8, 64)
    lengths = padded["attention_mask"].sum(1)
    assert lengths.min() >= 32 and lengths.max() <= 64 and not padded["attention_mask"].all()
    assert (full["input_ids"][:, 0] == 2).all() and full["labels"].max() < bench.NUM_LABELS


def test_question_answering_batches_hold_an_answer_span_in_the_second_segment(bench):
    batch = bench.make_batch(16, 64, 500, padded=True, pin=False, task="question_answering")
    start, end = batch["labels"][:, 0], batch["labels"][:, 1]
    lengths = batch["attention_mask"].sum(1)
    second = batch["token_type_ids"].gather(1, start[:, None])[:, 0]
    assert (second == 1).all() and (start <= end).all() and (end < lengths - 1).all()  # never the final [SEP]
    assert len(set(start.tolist())) > 1


def test_cpu_smoke_run_times_question_answering(bench):
    results = bench.main(
        ["--device", "cpu", "--finetune-configs", "tiny-32:2", "--finetune-padding", "padded",
         "--finetune-tasks", "classification,question_answering"]
    )  # fmt: skip
    assert list(results) == ["tiny-32:2/padded", "question_answering/tiny-32:2/padded"]
    qa = results["question_answering/tiny-32:2/padded"]
    assert "error" not in qa, qa
    assert qa["task"] == "question_answering" and qa["ours"]["sequences_per_s"] > 0
    assert "| question_answering | tiny-32:2 | padded |" in bench.table(results)


TASKS = tuple(FAMILIES)  # every fine-tuning family the product has


def test_the_bench_times_every_fine_tuning_family(bench):
    assert tuple(bench.TASKS) == TASKS


def test_token_classification_batches_tag_first_pieces_and_ignore_the_rest(bench):
    batch = bench.make_batch(8, 64, 500, padded=True, pin=False, task="token_classification")
    labels, mask = batch["labels"], batch["attention_mask"]
    lengths = mask.sum(1)
    assert labels.shape == batch["input_ids"].shape and labels.dtype == torch.long
    assert not batch["token_type_ids"].any() and (batch["input_ids"][:, 0] == 2).all()
    tagged = labels != -100
    assert not tagged[:, 0].any() and tagged[:, 1].all()  # [CLS] untagged, the first word tagged
    assert not tagged[torch.arange(8), lengths - 1].any()  # nor the final [SEP]
    assert not (tagged & (mask == 0)).any()  # nor the padding
    assert (labels[tagged] < bench.NUM_LABELS).all() and (labels[tagged] >= 0).all()
    assert 0 < int(tagged.sum()) < int(lengths.sum()) - 16  # some pieces continue a word


def test_multiple_choice_batches_are_questions_of_padded_choices(bench):
    batch = bench.make_batch(4, 32, 500, padded=True, pin=False, task="multiple_choice")
    questions, choices, width = batch["input_ids"].shape
    assert (questions, choices) == (4, 4) and 16 <= width <= 32
    assert batch["attention_mask"].shape == batch["input_ids"].shape == batch["token_type_ids"].shape
    lengths = batch["attention_mask"].sum(-1)  # [questions, choices]: each choice its own length
    assert lengths.max() == width and len(set(lengths.flatten().tolist())) > 1
    assert (batch["input_ids"][..., 0] == 2).all() and batch["token_type_ids"].any()
    assert batch["labels"].shape == (4,) and (batch["labels"] < choices).all()


def test_sequence_batches_of_regression_and_multi_label_have_float_targets(bench):
    regression = bench.make_batch(8, 32, 500, padded=False, pin=False, task="regression")
    multi = bench.make_batch(8, 32, 500, padded=False, pin=False, task="multi_label")
    assert regression["labels"].shape == (8,) and regression["labels"].dtype == torch.float32
    assert multi["labels"].shape == (8, bench.NUM_LABELS) and multi["labels"].dtype == torch.float32
    assert set(multi["labels"].unique().tolist()) == {0.0, 1.0}


def test_cpu_smoke_run_times_every_new_task(bench):
    new = ["regression", "multi_label", "token_classification", "multiple_choice"]
    results = bench.main(
        ["--device", "cpu", "--finetune-configs", "tiny-32:2", "--finetune-padding", "padded",
         "--finetune-tasks", ",".join(new)]
    )  # fmt: skip
    assert list(results) == [f"{task}/tiny-32:2/padded" for task in new]
    for task in new:
        r = results[f"{task}/tiny-32:2/padded"]
        assert "error" not in r, r
        assert r["task"] == task and r["ours"]["sequences_per_s"] > 0 and r["transformers"]["sequences_per_s"] > 0
        assert f"| {task} | tiny-32:2 | padded |" in bench.table(results)
    assert results["multiple_choice/tiny-32:2/padded"]["width"] <= 32  # S of [B, choices, S]


def test_a_family_graphs_cannot_run_is_skipped_with_its_reason(bench, monkeypatch, tmp_path):
    import finetune_contenders

    monkeypatch.setitem(finetune_contenders.GRAPHS_UNSUPPORTED, "multiple_choice", "a reason")
    config = AlbertConfig.from_preset("tiny", vocab_size=500, num_labels=bench.NUM_LABELS)
    batch = bench.make_batch(2, 16, config.vocab_size, False, pin=False, task="multiple_choice")
    makers = bench.build_contenders(config, batch, torch.device("cpu"), "fp32", str(tmp_path), graphs=True,
                                    task="multiple_choice")  # fmt: skip
    with pytest.raises(NotImplementedError, match="cuda_graphs skipped for multiple_choice: a reason"):
        makers["ours_graphs"]()  # measure records it as ours_graphs_error


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("padded", [False, True])
def test_ours_and_the_trainer_take_the_same_steps(bench, tmp_path, padded, task):
    """Same weights and batch, fp32 on the CPU, no dropout: the same loss at the first step (the same
    function of the same weights: within 1e-4 relative) and after two optimizer steps (AdamW,
    clipping, schedule), so both sides of the comparison do the same work."""
    config = AlbertConfig.from_preset("tiny", vocab_size=500, num_labels=bench.NUM_LABELS, classifier_dropout_prob=0.0)
    batch = bench.make_batch(4, 32, config.vocab_size, padded, pin=False, task=task)
    makers = bench.build_contenders(config, batch, torch.device("cpu"), "fp32", str(tmp_path), task=task)
    contenders = {name: make() for name, make in makers.items()}
    if padded and task == "question_answering":
        # A padded position's start/end logit is in the softmax on both sides (as in Google's and
        # transformers' run_squad), so its gradient reaches the [pad] embedding, which transformers'
        # padding_idx then zeroes. Zeroing that one row here too shows it is the only difference.
        pad = config.to_hf_dict()["pad_token_id"]  # transformers' padding_idx
        embedding = contenders["ours"].model.albert.embeddings.word_embeddings.weight
        embedding.register_hook(lambda grad: grad.index_fill(0, torch.tensor([pad]), 0.0))
    losses = {name: [float(c.step()) for _ in range(3)] for name, c in contenders.items()}
    assert losses["ours"][0] == pytest.approx(losses["transformers"][0], rel=1e-4, abs=0)
    assert losses["ours"] == pytest.approx(losses["transformers"], abs=1e-4)
    # the optimizer did move them (a choice's one score starts near 0 whatever the weights: slower)
    assert losses["ours"][0] - losses["ours"][2] > (1e-4 if task == "multiple_choice" else 1e-3)
