"""The report stage without Ray: Figure 1 against transformers' hidden states, the markdown, and
report.md + figures from a synthetic run, locally and on s3:// (moto)."""

import dataclasses
import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import save_hf_pretrained
from pipelines.config import TrackingSection, load_config
from pipelines.report import finetuning, markdown
from pipelines.report.layers import layer_transitions, pad_examples, unmask
from pipelines.rundir.costs import ReservationMeter, cost_record, write_cost
from pipelines.rundir.ownership import write_marker
from pipelines.rundir.registry import is_up_to_date, stage_fingerprint
from pipelines.stages.report import run_report
from pipelines.storage import exists, filesystem, join, read_bytes, write_bytes, write_text

from ..tracking.reading import mlflow_artifact, mlflow_artifact_names, mlflow_runs

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def tiny_model(seed=0, layers=3):
    torch.manual_seed(seed)
    return AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=100, num_hidden_layers=layers))


def batch():
    return pad_examples(
        [
            {"input_ids": [2, 10, 11, 12, 3, 20, 21, 3], "token_type_ids": [0, 0, 0, 0, 0, 1, 1, 1]},
            {"input_ids": [2, 30, 3, 40, 3], "token_type_ids": [0, 0, 0, 1, 1]},
        ]
    )


def test_layer_transitions_match_transformers_hidden_states(tmp_path):
    transformers = pytest.importorskip("transformers")
    model = tiny_model()
    save_hf_pretrained(model, tmp_path)
    reference = transformers.AlbertModel.from_pretrained(tmp_path).eval()
    b = batch()
    with torch.no_grad():
        hidden = reference(**b, output_hidden_states=True).hidden_states  # L + 1 of (B, S, H)
    tokens = b["attention_mask"].bool()
    got = layer_transitions(model, **b)
    assert [t.step for t in got] == [0, 1, 2]
    for t, before, after in zip(got, hidden[:-1], hidden[1:]):
        assert t.l2_distance == pytest.approx((after - before).norm(dim=-1)[tokens].mean().item(), rel=1e-4)
        cosine = torch.nn.functional.cosine_similarity(after, before, dim=-1)[tokens].mean().item()
        assert t.cosine_similarity == pytest.approx(cosine, rel=1e-4)


def test_padding_is_left_out_of_attention_and_averages():
    model = tiny_model()
    a = {"input_ids": [2, 30, 3, 40, 3], "token_type_ids": [0, 0, 0, 1, 1]}
    b = {"input_ids": [2, 30, 31, 32, 33, 3, 40, 41, 3], "token_type_ids": [0] * 6 + [1] * 3}
    alone_a, alone_b = layer_transitions(model, **pad_examples([a])), layer_transitions(model, **pad_examples([b]))
    together = layer_transitions(model, **pad_examples([a, b]))  # a padded to b's 9 tokens
    for ta, tb, t in zip(alone_a, alone_b, together):  # token-weighted means of the two
        assert t.l2_distance == pytest.approx((5 * ta.l2_distance + 9 * tb.l2_distance) / 14, rel=1e-4)
        assert t.cosine_similarity == pytest.approx(
            (5 * ta.cosine_similarity + 9 * tb.cosine_similarity) / 14, rel=1e-4
        )


def test_unmask_restores_the_original_tokens():
    example = {"input_ids": [2, 4, 11, 4, 3], "masked_lm_positions": [1, 3], "masked_lm_ids": [10, 12]}
    assert unmask(example)["input_ids"] == [2, 10, 11, 12, 3]
    assert unmask({"input_ids": [2, 3], "masked_lm_positions": [], "masked_lm_ids": []})["input_ids"] == [2, 3]


def test_markdown_cells_and_tables():
    assert [markdown.fmt(v) for v in (None, 3, 12345, 0.123456, 123456.7, "0.5", "a|b", True)] == [
        "–",
        "3",
        "12,345",
        "0.1235",
        "123,457",
        "0.5",
        "a\\|b",
        "true",
    ]
    assert markdown.table(["a", "b"], [[1, 2.5]]) == "| a | b |\n|---|---|\n| 1 | 2.5 |"
    assert markdown.flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == {"a.b": 1, "a.c.d": 2, "e": 3}
    trials = [{"trial": str(i), "accuracy": "0.5"} for i in range(finetuning.MAX_TRIAL_ROWS + 3)]
    text = finetuning.finetune_section({"fingerprint": "x"}, trials, None, [], [], {})
    assert f"{finetuning.MAX_TRIAL_ROWS + 3} trials" in text and "(3 more trials in finetune/trials.csv)" in text
    costs = markdown.cost_section(
        [
            {"stage": "vocab", "wall_s": 60.0, "cpu_hours": 0.5, "gpu_hours": 0.0},
            {"stage": "data", "wall_s": 30.0, "cpu_hours": 0.25, "gpu_hours": 0.0},
            {"stage": "pretrain", "note": "not run"},
        ]
    )
    assert "| all stages | 90 | 0.75 | 0 |" in costs


def test_the_report_names_the_sentence_objective():
    """nsp's figures are named NSP; without a sentence objective there are none, and it says so."""
    from pipelines.report.plots import pretraining_curves

    def data_manifest(objective, **extra):
        return {
            "inputs": [],
            "documents": {"read": 2, "used": 2, "rejected": {}},
            "examples": {"train": 4},
            "tokens": {"train": 40},
            "masking": {"mode": "static"},
            "sentence_objective": objective,
            **extra,
        }

    pool = {"train": {"documents": 9, "tokens": 99}, "validation": {"documents": 2, "tokens": 20}}
    nsp = markdown.data_section(None, data_manifest("nsp", nsp_pool=pool, statistics={"random_next_share": 0.49}))
    assert "| sentence objective | NSP (next-sentence prediction, BERT's) |" in nsp
    assert "| B from another document (NSP label 1) share | 0.49 |" in nsp and "| 9 / 2 |" in nsp
    none = markdown.data_section(None, data_manifest("none", statistics={}))
    assert "| sentence objective | none (masked LM only) |" in none and "label 1" not in none

    line = {"step": 4, "mlm_loss": 3.0, "mlm_accuracy": 0.2, "sop_loss": None, "sop_accuracy": None, "lr": 0.1}
    final = {"mlm_loss": 3.1, "mlm_accuracy": 0.2, "sop_loss": None, "sop_accuracy": None, "sequences": 8}
    text = markdown.pretrain_section({"steps": 4}, [line], final, None, "none")
    assert "Sentence objective: none" in text and "sentence head and the pooler were not trained" in text
    assert "sop" not in text and "nsp" not in text
    numbers = {"sop_loss": 0.6, "sop_accuracy": 0.7}
    text = markdown.pretrain_section({"steps": 4}, [{**line, **numbers}], {**final, **numbers}, None, "nsp")
    assert "loss = masked LM + NSP" in text and "| nsp_accuracy |" in text and "sop" not in text
    assert pretraining_curves([line], [], [], "none").startswith(PNG_MAGIC)


def test_reservation_meter_integrates_over_time():
    with ReservationMeter(lambda: (2.0, 1.0), interval_s=0.01) as meter:
        import time

        time.sleep(0.2)
    assert 0.3 < meter.cpu_seconds < 0.6 and meter.gpu_seconds == pytest.approx(meter.cpu_seconds / 2)
    assert meter.peak_cpus == 2.0
    record = cost_record("f", 0.0, 0.2, meter, {"CPU": 4.0})
    assert record["cpu_hours"] == pytest.approx(meter.cpu_seconds / 3600) and record["cluster_gpus"] == 0.0


def write_json(path, value):
    write_text(path, json.dumps(value))


def synthetic_run(run_dir: str, with_finetune: bool = True):
    """The outputs the other stages leave, small and made up, written through storage."""
    config = load_config(None, [f"run_dir={run_dir}", "model.preset=tiny", "model.num_hidden_layers=3"])
    write_json(
        join(run_dir, "vocab", "manifest.json"),
        {
            "vocab_size": 100,
            "sample": {"sentences": 50, "sampled_sentences": 50},
            "fingerprint": stage_fingerprint(config, "vocab"),
        },
    )
    rows = [
        {
            "input_ids": [2, 4, 11, 3, 20, 3],
            "token_type_ids": [0, 0, 0, 0, 1, 1],
            "masked_lm_positions": [1],
            "masked_lm_ids": [10],
        }
        for _ in range(3)
    ]
    fs, path = filesystem(join(run_dir, "data", "validation", "part-00000-000.parquet"))
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, filesystem=fs)
    write_json(
        join(run_dir, "data", "manifest.json"),
        {
            "inputs": [{"path": "a.txt", "bytes": 1000}],
            "examples": {"train": 30, "validation": 3},
            "tokens": {"train": 180, "validation": 18},
            "documents": {"read": 5, "used": 4, "rejected": {"empty": 1}},
            "masking": {"mode": "static"},
            "statistics": {"masked_share": 0.15, "swapped_share": 0.5},
            "config": {"data": {"max_seq_length": 64}},
            "num_workers": 2,
            "seconds": 3.0,
            "fingerprint": stage_fingerprint(config, "data"),
        },
    )
    metrics = [
        {
            "step": s,
            "lr": 0.01,
            "mlm_loss": 5.0 - s,
            "mlm_accuracy": 0.1 * s,
            "sop_loss": 0.7,
            "sop_accuracy": 0.5,
            "grad_norm": 1.0,
            "tokens_per_s": 1000.0,
            "mfu": None,
            "peak_memory_gb": 1.0,
        }
        for s in (1, 2, 3)
    ] + [
        {
            "split": "validation",
            "step": 3,
            "mlm_loss": 2.5,
            "mlm_accuracy": 0.3,
            "sop_loss": 0.69,
            "sop_accuracy": 0.55,
        },
        # training health's lines (pipelines/train/health.py): a skipped step and the rollback it led to
        {"event": "skipped", "step": 2, "reason": "non-finite loss", "loss": "nan", "grad_norm": "nan", "in_a_row": 1},
        {
            "event": "rollback",
            "step": 2,
            "to_step": 1,
            "reason": "non-finite loss",
            "rollbacks": 1,
            "lr_scale": 0.5,
            "skip_steps": [],
        },
    ]
    write_text(join(run_dir, "pretrain", "metrics.jsonl"), "".join(json.dumps(m) + "\n" for m in metrics))
    write_json(join(run_dir, "pretrain", "eval.json"), {"mlm_loss": 2.5, "mlm_accuracy": 0.3, "sequences": 3})
    with tempfile.TemporaryDirectory() as local:
        save_hf_pretrained(tiny_model(), local)
        for name in ("config.json", "model.safetensors"):
            write_bytes(join(run_dir, "pretrain", "hf", name), Path(local, name).read_bytes())
    write_json(
        join(run_dir, "pretrain", "manifest.json"),
        {"seconds": 12.0, "fingerprint": stage_fingerprint(config, "pretrain")},
    )
    if with_finetune:
        write_text(
            join(run_dir, "finetune", "trials.csv"), "trial,finetune.lr,accuracy\nt0,0.0001,0.8\nt1,0.0003,0.9\n"
        )
        write_json(join(run_dir, "finetune", "best.json"), SYNTHETIC_BEST)
        write_text(
            join(run_dir, "finetune", "predictions.jsonl"),
            "".join(json.dumps({"id": i, "prediction": p, "label": g}) + "\n" for i, (p, g) in enumerate(PREDICTED)),
        )
        write_json(
            join(run_dir, "finetune", "manifest.json"),
            {"seconds": 8.0, "fingerprint": stage_fingerprint(config, "finetune")},
        )
    write_marker(run_dir, "run")  # what the stages leave: folders marked as albert-ray's
    for stage in ("vocab", "data", "pretrain", "finetune")[: 4 if with_finetune else 3]:
        write_marker(join(run_dir, stage), "stage", stage=stage)
    return config


PREDICTED = [("a", "a"), ("a", "a"), ("b", "a"), ("b", "b"), ("a", "b"), ("c", "c")]
"""(prediction, gold) of a synthetic search's eval examples: per class a 2/3 b 1/2 c 1/1 precision."""
SYNTHETIC_BEST = {
    "trial_id": "t1",
    "epoch": 2,
    "metric": "accuracy",
    "value": 0.9,
    "metrics": {"accuracy": 0.9, "macro_f1": 0.85, "eval_loss": 0.3},
    "searched": {"finetune.lr": 0.0003},
    "epochs": [{"epoch": 1, "accuracy": 0.8, "eval_loss": 0.5}, {"epoch": 2, "accuracy": 0.9, "eval_loss": 0.3}],
    "baseline": {"predictor": "majority class 'a' (50% of the training examples)", "metrics": {"accuracy": 0.5}},
    "finetune": {"task": "classification", "lr": 0.0003, "max_seq_length": 64, "doc_stride": 128, "eval_batch_size": 8},
    "label_names": ["a", "b", "c"],
    "eval_examples": 6,
}


def check_report(config):
    run_dir = config.run_dir
    out = run_report(config)
    assert out == join(run_dir, "report")
    text = read_bytes(join(out, "report.md")).decode()
    for heading in (
        "## Data",
        "## Pretraining",
        "## Layer transitions (the ALBERT paper's Figure 1)",
        "## Training health",
        "## Fine-tuning search",
        "## Cost per stage",
        "## Configuration",
    ):
        assert heading in text
    assert "![Pretraining curves](pretraining_curves.png)" in text
    assert "![L2 distance and cosine similarity per layer](layer_transitions.png)" in text
    assert "| train | 30 | 180 | 6 |" in text
    # a data manifest from before data.sentence_objective: its examples were SOP's
    assert "| sentence objective | SOP (sentence-order prediction, ALBERT's) |" in text
    assert "| swapped (SOP label 1) share | 0.5 |" in text and "Sentence objective: SOP" in text
    assert "Events (1 skipped, 1 rollback; vertical lines on the curves)" in text
    assert (
        "| 2 | rollback | step 2 rollback 1 (non-finite loss) to the checkpoint of step 1; lr now x0.5 of train.lr |"
        in text
    )
    assert "| t1 | 0.0003 | 0.9 |" in text and "Best: **accuracy 0.9**, trial `t1` at epoch 2, on 6 eval" in text
    assert "| this model (the best trial) | 0.9 | 0.85 |" in text
    assert "| trivial: majority class 'a' (50% of the training examples) | 0.5 | – |" in text
    assert "| finetune.lr | 0.0003 |" in text and "| finetune.max_seq_length | 64 |" in text
    assert "finetune.doc_stride" not in text.split("## Cost per stage")[0]  # only question answering reads it
    assert "finetune.eval_batch_size" not in text.split("## Cost per stage")[0]  # a setting: changes no result
    assert "| a | 0.6667 | 0.6667 | 0.6667 | 3 |" in text and "| c | 1 | 1 | 1 | 1 |" in text
    assert "| a | 2 | 1 | 0 |" in text and "| b | 1 | 1 | 0 |" in text  # the confusion matrix's rows
    assert "| 1 | 0.8 | 0.5 |" in text and "| 2 | 0.9 | 0.3 |" in text  # the best trial's epochs
    assert "| pretrain | 12 | – | – | ran outside the DAG |" in text
    for png in ("pretraining_curves.png", "layer_transitions.png", "finetune_curve.png", "confusion_matrix.png"):
        assert read_bytes(join(out, png)).startswith(PNG_MAGIC)
    transitions = json.loads(read_bytes(join(out, "layer_transitions.json")))
    assert [t["step"] for t in transitions] == [0, 1, 2]
    manifest = json.loads(read_bytes(join(out, "manifest.json")))
    assert manifest["fingerprint"] == stage_fingerprint(config, "report") and is_up_to_date(config, "report")
    return text


def test_report_from_a_synthetic_run(tmp_path, capsys):
    config = synthetic_run(str(tmp_path / "run"))
    write_cost(
        config.run_dir,
        "data",
        {
            "fingerprint": stage_fingerprint(config, "data"),
            "started": 0.0,
            "wall_s": 30.0,
            "cpu_hours": 0.5,
            "gpu_hours": 0.0,
            "cluster_cpus": 4.0,
            "cluster_gpus": 0.0,
        },
    )
    write_cost(config.run_dir, "vocab", {"fingerprint": "stale", "started": 0.0, "wall_s": 99.0})
    text = check_report(config)
    assert "| data | 30 | 0.5 | 0 | ran 1970-01-01 00:00 UTC on a cluster of 4 logical CPUs, 0 GPUs |" in text
    assert "| vocab | – | – | – | ran outside the DAG |" in text  # its cost record is for another output
    assert run_report(config) == join(config.run_dir, "report")
    assert "report: up to date" in capsys.readouterr().out


def test_the_report_names_the_encoder_fine_tuning_started_from(tmp_path):
    """The run's own pretrain/hf by default; finetune.pretrained's folder where the search started from
    one elsewhere (its manifest's `pretrained`): a fine-tune-only run named a pretrain/hf it never had."""
    config = synthetic_run(str(tmp_path / "run"))
    run_report(config)
    header = (tmp_path / "run" / "report" / "report.md").read_text().splitlines()[2]
    assert f"pretrained `{tmp_path / 'run' / 'pretrain' / 'hf'}`, fine-tuned `" in header
    manifest = tmp_path / "run" / "finetune" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "pretrained": "/models/elsewhere/hf"}))
    run_report(config, force=True)
    header = (tmp_path / "run" / "report" / "report.md").read_text().splitlines()[2]
    assert "pretrained `/models/elsewhere/hf`, fine-tuned `" in header


def test_report_without_finetune_is_partial_and_never_up_to_date(tmp_path):
    config = synthetic_run(str(tmp_path / "run"), with_finetune=False)
    run_report(config)
    text = (tmp_path / "run" / "report" / "report.md").read_text()
    assert "_The finetune stage has no output in this run yet._" in text
    assert not is_up_to_date(config, "report")


def test_report_on_s3(s3_endpoint, mlflow_server):
    """With MLflow on (issue #31), report.md and its figures are a run's artifacts."""
    fs, _ = filesystem("s3://report-test/x")
    fs.mkdir("report-test")
    config = synthetic_run("s3://report-test/run")
    tracking = TrackingSection(mlflow_uri=mlflow_server, mlflow_experiment="report-on-s3")
    check_report(dataclasses.replace(config, tracking=tracking))
    assert exists("s3://report-test/run/report/manifest.json")
    run = mlflow_runs(mlflow_server, "report-on-s3")["report"]
    assert run.info.status == "FINISHED"
    names = [
        "confusion_matrix.png",
        "finetune_curve.png",
        "layer_transitions.png",
        "pretraining_curves.png",
        "report.md",
    ]
    assert mlflow_artifact_names(mlflow_server, run.info.run_id, "report") == names
    for name in names:
        report = read_bytes(f"s3://report-test/run/report/{name}")
        assert mlflow_artifact(mlflow_server, run.info.run_id, f"report/{name}") == report
