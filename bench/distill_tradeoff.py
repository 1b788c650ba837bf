"""ALBERT's compute trade-off on BBC News, side by side in one run: a fine-tuned teacher at full
depth, half-depth students distilled from it (the distill stage's trial: the teacher's own weights,
its shared layer applied half as often, trained against its outputs) over several seeds, and the
teacher exiting early at a few patiences (PABEE). Accuracy on the same eval rows and CPU predict
rows/s through the predict path (pipelines/inference/predictor.py, as `albert-ray predict` runs
in-process), every arm timed in turn, --repeats rounds, the median taken (the machine is shared).

The teacher is fine-tuned with finetune.exit_heads=true (the head trained at every depth), so one
model is both the teacher and the early-exit model; its full-depth answer is the teacher's. It
starts from --pretrained (a pretrained transformers ALBERT folder, e.g. make run's
runs/default/pretrain/hf), or without it from a random initialisation of the tiny preset with a
SentencePiece vocabulary trained here on BBC News. No Ray.

    python bench/distill_tradeoff.py --threads 1                       # tiny from scratch, 3 seeds
    python bench/distill_tradeoff.py --pretrained runs/default/pretrain/hf --out tradeoff.json
    python bench/distill_tradeoff.py --smoke                           # seconds: the bench's own test
    python bench/distill_tradeoff.py --run-dir runs/default --patiences "" # make run's model, after
        albert-ray distill --config configs/default.yaml distill.layers=half tune.repeats=2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter

import numpy as np
import torch

from albert_model import AlbertConfig
from albert_model.hf import save_hf_pretrained
from albert_model.model import AlbertForPreTraining
from pipelines.config import DistillSection, FinetuneSection
from pipelines.finetuning.distill import Teacher, teacher_scores
from pipelines.finetuning.families import task_family
from pipelines.finetuning.families._sequence.task import load_task
from pipelines.finetuning.trial import encode_task, fit_trial
from pipelines.inference.predictor import EXIT_DEPTH, Predictor
from pipelines.prep.text import normalize_text
from pipelines.storage.models import materialize, read_model_config, read_model_files


def random_pretrained(root: str, vocab_size: int, layers: int | None = None) -> str:
    """A random tiny AlbertForPreTraining with a SentencePiece vocabulary trained on BBC News."""
    from pipelines.finetuning.tables import bbc_news_examples
    from pipelines.stages.vocab import train_sentencepiece

    lines = [line for text in bbc_news_examples().texts for line in text.splitlines() if line.strip()]
    spiece = os.path.join(root, "spiece.model")
    with open(spiece, "wb") as f:
        f.write(train_sentencepiece([normalize_text(s) for s in lines], vocab_size, []))
    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=vocab_size)
    model = AlbertForPreTraining(config.replace(num_hidden_layers=layers or config.num_hidden_layers))
    return str(save_hf_pretrained(model, os.path.join(root, "hf"), spiece_model=spiece))


def deepened(pretrained: str, root: str, layers: int) -> str:
    """A copy of the pretrained folder whose config applies its shared layer `layers` times (the
    same weights: ALBERT's depth is a count, not parameters)."""
    files = read_model_files(pretrained, "--pretrained")
    files["config.json"] = json.dumps({**json.loads(files["config.json"]), "num_hidden_layers": layers}).encode()
    return materialize(files, os.path.join(root, "deepened"))


def last_checkpoint(cfg: FinetuneSection, data, directory: str, root: str) -> tuple[str, dict]:
    reports = []

    def report(metrics: dict, checkpoint: str) -> None:
        print(f"{os.path.basename(root)} epoch {metrics['epoch']}: accuracy {metrics['accuracy']:.4f}", flush=True)
        reports.append((metrics, checkpoint))

    fit_trial(cfg, data, directory, root, report)
    metrics, checkpoint = reports[-1]
    return checkpoint, metrics


def accuracy(outputs: list[dict], gold: list[str]) -> float:
    return float(np.mean([o["prediction"] == g for o, g in zip(outputs, gold)]))


def timed(predictor: Predictor, rows: list[dict]) -> tuple[float, list[dict]]:
    started = time.perf_counter()
    outputs = predictor.predict(rows)
    return len(rows) / (time.perf_counter() - started), outputs


def timed_arms(teacher: str, students: list[str], rows: list[dict], args) -> tuple[dict, dict, dict]:
    """Each arm's predict rows/s over `rows` (--repeats rounds, every arm in turn: the same load falls
    on all) and its last answers: the teacher, each student, the teacher exiting early."""
    patiences = [int(p) for p in args.patiences.split(",") if p]
    entropies = [float(e) for e in args.entropies.split(",") if e]
    arms = {"teacher": Predictor.load(teacher, device="cpu")}
    arms.update({f"student seed {i}": Predictor.load(s, device="cpu") for i, s in enumerate(students)})
    arms.update({f"exit patience {p}": Predictor.load(teacher, device="cpu", exit_patience=p) for p in patiences})
    arms.update({f"exit entropy {e:g}": Predictor.load(teacher, device="cpu", exit_entropy=e) for e in entropies})
    for predictor in arms.values():  # a warm-up: allocations, caches
        predictor.predict(rows[:64])
    speeds: dict[str, list[float]] = {name: [] for name in arms}
    answers: dict[str, list[dict]] = {}
    for _ in range(args.repeats):
        for name, predictor in arms.items():
            speed, answers[name] = timed(predictor, rows)
            speeds[name].append(speed)
    return speeds, answers, arms


def from_run(args) -> dict:
    """--run-dir: the run's fine-tuned model (finetune/best) against its distilled student
    (distill/best) and itself exiting early, on the finetune stage's own eval rows; the students'
    accuracy over seeds from distill/best.json's repeats. Nothing is trained."""
    started = time.time()
    family = task_family("classification")
    with open(os.path.join(args.run_dir, "distill", "best.json")) as f:
        best = json.load(f)
    cfg = FinetuneSection(**best["finetune"])  # the student's trial's: the task, split and eval rows the run used
    task = load_task(cfg, family)
    rows = [{"text": text} for text in task.eval.texts]
    gold = [task.label_names[int(t)] for t in task.eval_targets]
    teacher, student = (os.path.join(args.run_dir, stage, "best") for stage in ("finetune", "distill"))
    speeds, answers, arms = timed_arms(teacher, [student], rows, args)
    results = arm_results(arms, speeds, answers, gold)
    base = results["teacher"]
    seeds = [run["value"] for run in best.get("repeats", {}).get("runs", [])] or [best["value"]]
    summary = {
        "teacher": {**base, "num_hidden_layers": best["teacher"]["num_hidden_layers"], "model": teacher},
        "students": {
            "num_hidden_layers": best["student_layers"],
            "accuracy_mean": statistics.fmean(seeds),
            "accuracy_std": statistics.stdev(seeds) if len(seeds) > 1 else 0.0,
            "seeds": seeds,
            "speedup_mean": results["student seed 0"]["rows_per_s"] / base["rows_per_s"],
        },
        "arms": results,
        "eval_rows": len(rows),
        "run_dir": args.run_dir,
        "args": vars(args),
        "seconds": time.time() - started,
    }
    return reported(summary, args.out)


def arm_results(arms: dict, speeds: dict, answers: dict, gold: list[str]) -> dict:
    """Each arm's accuracy, median rows/s and, exiting early, its depths."""
    results = {}
    for name in arms:
        found = {"accuracy": accuracy(answers[name], gold), "rows_per_s": statistics.median(speeds[name])}
        if name.startswith("exit"):
            depths = [a[EXIT_DEPTH] for a in answers[name]]
            found["mean_exit_depth"] = float(np.mean(depths))
            found["exit_depths"] = {str(d): n for d, n in sorted(Counter(depths).items())}
        results[name] = found
    return results


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pretrained", help="a pretrained ALBERT folder; default: a random tiny one")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument(
        "--layers",
        type=int,
        help="the teacher's applications of its layer (the random tiny model's: 4; or --pretrained's, so often)",
    )
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=6, help="the teacher's fine-tuning epochs")
    parser.add_argument("--student-epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=3, help="students, each of another finetune.seed")
    parser.add_argument("--patiences", default="1,2,3")
    parser.add_argument("--entropies", default="0.2,0.5", help="early exit's entropy thresholds (nats)")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--temperature", type=float, default=2.0)
    parser.add_argument("--max-train", type=int, default=None)
    parser.add_argument("--max-eval", type=int, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3, help="timing rounds; the median rows/s is reported")
    parser.add_argument("--smoke", action="store_true", help="a few rows and one epoch: that it runs")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument(
        "--run-dir", help="a run with finetune/best and distill/best (make run's, then albert-ray distill): time those"
    )
    args = parser.parse_args(argv)
    if args.run_dir:
        torch.set_num_threads(args.threads)
        return from_run(args)
    if args.smoke:
        args.vocab_size, args.seq, args.epochs, args.student_epochs = 500, 32, 1, 1
        args.seeds, args.patiences, args.max_train, args.max_eval, args.repeats = 2, "1", 48, 24, 1
        args.entropies = ""
    torch.set_num_threads(args.threads)
    started = time.time()
    family = task_family("classification")
    with tempfile.TemporaryDirectory(prefix="distill-tradeoff-") as work:
        if args.pretrained:
            pretrained = deepened(args.pretrained, work, args.layers) if args.layers else args.pretrained
        else:
            pretrained = random_pretrained(work, args.vocab_size, args.layers)
        cfg = FinetuneSection(
            max_seq_length=args.seq,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            exit_heads=True,
            max_train_examples=args.max_train,
            max_eval_examples=args.max_eval,
        )
        data = encode_task(cfg, read_model_files(pretrained, "--pretrained"))
        teacher, teacher_metrics = last_checkpoint(cfg, data, pretrained, os.path.join(work, "teacher"))
        depth = read_model_config(teacher, "teacher")["num_hidden_layers"]
        settings = DistillSection(layers="half", alpha=args.alpha, temperature=args.temperature)
        logits = teacher_scores(cfg, family, data.encoded.train, data.pad_id, teacher)
        data.teacher = Teacher(logits, settings.student_layers(depth), depth, settings)
        students = []
        for seed in range(args.seeds):
            student_cfg = FinetuneSection(**{**cfg.__dict__, "epochs": args.student_epochs, "seed": seed})
            students.append(last_checkpoint(student_cfg, data, teacher, os.path.join(work, f"student{seed}"))[0])

        task = load_task(cfg, family)
        rows = [{"text": text} for text in task.eval.texts]
        gold = [task.label_names[int(t)] for t in task.eval_targets]
        speeds, answers, arms = timed_arms(teacher, students, rows, args)

    results = arm_results(arms, speeds, answers, gold)
    base = results["teacher"]
    student_acc = [results[n]["accuracy"] for n in results if n.startswith("student")]
    student_speed = [results[n]["rows_per_s"] for n in results if n.startswith("student")]
    summary = {
        "teacher": {**base, "num_hidden_layers": depth, "fine_tuning": teacher_metrics},
        "students": {
            "num_hidden_layers": data.teacher.layers,
            "accuracy_mean": statistics.fmean(student_acc),
            "accuracy_std": statistics.stdev(student_acc) if len(student_acc) > 1 else 0.0,
            "speedup_mean": statistics.fmean(student_speed) / base["rows_per_s"],
        },
        "arms": results,
        "eval_rows": len(rows),
        "pretrained": args.pretrained or "random tiny (no pretraining)",
        "args": vars(args),
        "seconds": time.time() - started,
    }
    return reported(summary, args.out)


def reported(summary: dict, out: str | None) -> dict:
    """The summary printed as a table and, with --out, written as JSON."""
    print(table(summary))
    if out:
        with open(out, "w") as f:
            json.dump(summary, f, indent=2)
    return summary


def table(summary: dict) -> str:
    """The trade-off as a Markdown table: accuracy and its loss in points against the teacher, rows/s
    and the speed-up, the mean exit depth."""
    base = summary["arms"]["teacher"]
    lines = [
        "| model | accuracy | vs teacher (points) | rows/s | speed-up | mean exit depth |",
        "|---|---|---|---|---|---|",
    ]
    for name, arm in summary["arms"].items():
        loss = 100 * (arm["accuracy"] - base["accuracy"])
        exits = f"{arm['mean_exit_depth']:.2f}" if "mean_exit_depth" in arm else ""
        lines.append(
            f"| {name} | {arm['accuracy']:.4f} | {loss:+.1f} | {arm['rows_per_s']:.1f} | "
            f"{arm['rows_per_s'] / base['rows_per_s']:.2f}x | {exits} |"
        )
    students = summary["students"]
    lines.append(
        f"\nstudents ({students['num_hidden_layers']} of {summary['teacher']['num_hidden_layers']} layers): accuracy "
        f"{students['accuracy_mean']:.4f} +- {students['accuracy_std']:.4f} (mean +- sd over seeds), "
        f"{students['speedup_mean']:.2f}x the teacher's rows/s"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
