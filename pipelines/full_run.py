"""`python pipelines/full_run.py`: vocab -> data -> pretrain -> finetune -> report as one Ray DAG.

Each stage is a Ray task that reserves no CPU (the stage's own Ray Data / Train / Tune work reserves
what it needs) and calls the stage's `run_<stage>`, the same code as its standalone command. The
tasks are chained through ObjectRefs, so a stage starts when the one before it has returned and a
failure stops everything after it. Every stage skips itself when its output is up to date
(pipelines.stages), so submitting the job again resumes where the last one stopped.

    python pipelines/full_run.py [--config FILE] [--stages a,b] [--force STAGE] [--dry-run] [key=value ...]
"""
from __future__ import annotations

import sys
from pathlib import Path

if not __package__:  # run as a file (what `ray job submit` runs): import the package, not its files
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import importlib  # noqa: E402
import logging  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

from pipelines.config import RunConfig, build_arg_parser, parse_cli  # noqa: E402
from pipelines.prep.storage import exists, join  # noqa: E402
from pipelines.report.costs import ReservationMeter, cost_record, write_cost  # noqa: E402
from pipelines.stages import STAGES, is_up_to_date, read_manifest, stage_dir, stage_fingerprint  # noqa: E402

log = logging.getLogger(__name__)

ORDER = list(STAGES)
STAGE_FUNCTIONS = {"vocab": "pipelines.vocab:run_vocab", "data": "pipelines.data:run_data",
                   "pretrain": "pipelines.pretrain:run_pretrain", "finetune": "pipelines.finetune:run_finetune",
                   "report": "pipelines.report.stage:run_report"}
OUTPUTS = {
    "vocab": ["vocab/spiece.model", "vocab/spiece.vocab"],
    "data": ["data/train/*.parquet", "data/validation/*.parquet"],
    "pretrain": ["pretrain/metrics.jsonl", "pretrain/eval.json", "pretrain/hf/"],
    "finetune": ["finetune/trials.csv", "finetune/best.json", "finetune/best/"],
    "report": ["report.md", "report/*.png"],
}
# The report is written from whatever inputs exist; the others need all of theirs.
PARTIAL_INPUTS_OK = {"report"}


class StageFailed(RuntimeError):
    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"stage {stage} failed: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def select_stages(stages: str | None, force: str | None) -> tuple[list[str], set[str]]:
    """The stages to run, in DAG order, and those forced: `force` and every selected stage after it."""
    selected = ORDER if stages is None else [s.strip() for s in stages.split(",") if s.strip()]
    unknown = [s for s in selected if s not in STAGES]
    if unknown or not selected:
        raise ValueError(f"--stages {stages!r}: unknown or no stage; the stages are {','.join(ORDER)}")
    selected = [s for s in ORDER if s in selected]
    if force is None:
        return selected, set()
    if force not in selected:
        raise ValueError(f"--force {force!r}: not one of the stages to run ({','.join(selected)})")
    return selected, {s for s in selected if ORDER.index(s) >= ORDER.index(force)}


@dataclass
class StagePlan:
    name: str
    selected: bool
    runs: bool
    status: str
    """Why it runs or not: forced, no output yet, config or inputs changed, up to date, not selected."""
    inputs: list[str]
    outputs: list[str]


def plan_dag(config: RunConfig, selected: Sequence[str], forced: set[str]) -> list[StagePlan]:
    """What a submission would do. A stage's fingerprint is predicted from the fingerprints its
    inputs will have (they are config hashes, so they are known before anything runs)."""
    predicted: dict[str, str | None] = {}
    plans = []
    for name in ORDER:
        stage = STAGES[name]
        manifest = read_manifest(config, name)
        current = manifest.get("fingerprint") if manifest else None
        inputs = [f"{dep}: {stage_dir(config, dep)}" for dep in stage.inputs] + [
            f"config: {', '.join(stage.config_keys)}" if stage.config_keys else "config: none"]
        outputs = [join(config.run_dir, o) for o in OUTPUTS[name]] + [join(stage_dir(config, name), "manifest.json")]
        if name not in selected:
            predicted[name] = current
            have = "no output" if manifest is None else "has output"
            plans.append(StagePlan(name, False, False, f"not selected ({have})", inputs, outputs))
            continue
        missing = [dep for dep in stage.inputs if predicted[dep] is None]
        fingerprint = stage_fingerprint(config, name, {dep: predicted[dep] or "" for dep in stage.inputs})
        if name == "finetune" and config.finetune.pretrained:  # a model from outside this run, not pretrain's
            missing, fingerprint = [], stage_fingerprint(config, name)
        if name in forced:
            status = "runs: forced"
        elif missing:
            status = (f"runs: partial, without {', '.join(missing)}" if name in PARTIAL_INPUTS_OK
                      else f"runs, but needs {', '.join(missing)} output, which is missing and not selected")
        elif current is None:
            status = "runs: no output yet"
        elif current != fingerprint:
            status = "runs: config or inputs changed"
        else:
            status = "up to date: skipped"
        runs = status.startswith("runs")
        predicted[name] = fingerprint if not missing or name in PARTIAL_INPUTS_OK else None
        plans.append(StagePlan(name, True, runs, status, inputs, outputs))
    return plans


def format_plan(config: RunConfig, plans: list[StagePlan]) -> str:
    lines = [f"DAG for run_dir={config.run_dir} ({' -> '.join(ORDER)}):"]
    for p in plans:
        lines.append(f"  {p.name}: {p.status}")
        lines += [f"      in:  {i}" for i in p.inputs]
        lines += [f"      out: {o}" for o in p.outputs]
    return "\n".join(lines)


def stage_function(name: str):
    module, _, function = STAGE_FUNCTIONS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def run_stage(name: str, config: RunConfig, force: bool, *after: Any) -> dict[str, Any]:
    """Run one stage (skipping itself when up to date) and record what it cost. `after`: the
    previous stage's result; as a task argument it makes Ray start this stage only once that exists."""
    import ray

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    up_to_date = not force and is_up_to_date(config, name)

    def reserved() -> tuple[float, float]:
        total, free = ray.cluster_resources(), ray.available_resources()
        return (total.get("CPU", 0.0) - free.get("CPU", 0.0), total.get("GPU", 0.0) - free.get("GPU", 0.0))

    started = time.time()
    with ReservationMeter(reserved) as meter:
        output = stage_function(name)(config, force=force)
    wall_s = time.time() - started
    if not up_to_date:
        manifest = read_manifest(config, name) or {}
        write_cost(config.run_dir, name, cost_record(manifest.get("fingerprint", ""), started, wall_s, meter,
                                                     ray.cluster_resources()))
    return {"stage": name, "output": output, "skipped": up_to_date, "wall_s": wall_s}


def run_dag(config: RunConfig, selected: Sequence[str], forced: set[str]) -> list[dict[str, Any]]:
    """Submit the chain of stage tasks and wait for each in turn; raises StageFailed at the first failure."""
    import ray

    from pipelines.ray_runtime import init_ray

    init_ray()
    task = ray.remote(num_cpus=0, max_retries=1)(run_stage)
    refs, previous = [], None
    for name in selected:
        after = [] if previous is None else [previous]
        previous = task.options(name=f"stage:{name}").remote(name, config, name in forced, *after)
        refs.append((name, previous))
    results = []
    for name, ref in refs:
        try:
            result = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            print(str(e), file=sys.stderr, flush=True)
            raise StageFailed(name, e.cause if e.cause is not None else e) from None
        print(f"full_run: {name}: {'up to date, skipped' if result['skipped'] else 'done'} in "
              f"{result['wall_s']:.1f} s -> {result['output']}", flush=True)
        results.append(result)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = build_arg_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--stages", metavar="A,B", help=f"run only these stages (default: all: {','.join(ORDER)})")
    parser.add_argument("--force", metavar="STAGE", help="rerun this stage and every selected stage after it")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the DAG with each stage's inputs, outputs and whether it is up to date")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = build_parser()
    config = parse_cli(argv, parser.description, parser)
    args = parser.parsed  # type: ignore[attr-defined]
    try:
        selected, forced = select_stages(args.stages, args.force)
    except ValueError as e:
        parser.error(str(e))
    print(format_plan(config, plan_dag(config, selected, forced)), flush=True)
    if args.dry_run:
        return 0
    started = time.time()
    try:
        run_dag(config, selected, forced)
    except StageFailed as e:
        print(f"full_run: FAILED at stage {e.stage} after {time.time() - started:.0f} s: "
              f"{type(e.error).__name__}: {e.error}\nfull_run: the outputs of the stages before {e.stage} "
              f"are complete and will be reused by the next submission", flush=True)
        return 1
    print(f"full_run: all stages done in {time.time() - started:.0f} s", flush=True)
    for label, path in [("report.md", join(config.run_dir, "report.md")),
                        ("pretrained model (transformers format)", join(stage_dir(config, "pretrain"), "hf")),
                        ("fine-tuned model (transformers format)", join(stage_dir(config, "finetune"), "best"))]:
        if exists(path):  # a sub-path (--stages) may not have made it
            print(f"full_run: {label}: {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
