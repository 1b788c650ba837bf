"""The whole product as one Ray DAG: vocab -> data -> pretrain -> finetune -> report (the command
is `python pipelines/full_run.py`, a launcher for `main` here).

Each stage is a Ray task that reserves no CPU (the stage's own Ray Data / Train / Tune work reserves
what it needs) and runs the stage through the shared lifecycle (pipelines/lifecycle.py), the same
code as its standalone command. The tasks are chained through ObjectRefs, so a stage starts when
the one before it has returned and a failure stops everything after it. The driver holds the
run_dir's lease for the whole DAG (a second run on the same run_dir stops at once). Every stage
skips itself when its output is up to date (pipelines/stages.py), so submitting the job again
resumes where the last one stopped.

    python pipelines/full_run.py [--config FILE] [--stages a,b] [--force STAGE] [--dry-run] [key=value ...]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .cli import report_user_error, setup_logging
from .config import Config, build_arg_parser, parse_cli
from .errors import ConfigError, UserError, find_user_error, one_line
from .generations import building_dir, previous_dir
from .lease import hold, read_holder
from .lifecycle import can_resume, extends_values, run_stage
from .ownership import check_input_paths, check_run_dir, ensure_run_dir, read_marker
from .report.costs import ReservationMeter, cost_record, write_cost
from .stages import (
    STAGES,
    config_value,
    read_manifest,
    read_manifest_at,
    stage_dir,
    stage_fingerprint,
    stage_inputs,
)
from .storage import exists, join

log = logging.getLogger(__name__)


class StageFailed(RuntimeError):
    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"stage {stage} failed: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def select_stages(stages: str | None, force: str | None) -> tuple[list[str], set[str]]:
    """The stages to run, in DAG order, and those forced: `force` and every selected stage after it."""
    order = list(STAGES)
    selected = order if stages is None else [s.strip() for s in stages.split(",") if s.strip()]
    unknown = [s for s in selected if s not in STAGES]
    if unknown or not selected:
        raise ConfigError(f"--stages {stages!r}: unknown or no stage; the stages are {','.join(order)}")
    selected = [s for s in order if s in selected]
    if force is None:
        return selected, set()
    if force not in selected:
        raise ConfigError(f"--force {force!r}: not one of the stages to run ({','.join(selected)})")
    return selected, {s for s in selected if order.index(s) >= order.index(force)}


@dataclass
class StagePlan:
    name: str
    selected: bool
    runs: bool
    status: str
    """Why it runs or not: forced, no output yet, config or inputs changed, up to date, not selected."""
    inputs: list[str]
    outputs: list[str]
    held: list[str]
    """What the run_dir holds for it: the current, unfinished and previous outputs."""


def _held(config: Config, name: str, lineage: str | None) -> list[str]:
    current, building, previous = (
        stage_dir(config, name),
        building_dir(config.run_dir, name),
        previous_dir(config.run_dir, name),
    )
    lines = []
    manifest = read_manifest_at(current)
    if manifest is not None:
        steps = f", {manifest['steps']} steps" if "steps" in manifest else ""
        lines.append(
            f"current:  {current} (complete{steps}, committed {manifest.get('committed', '?')}; kept until "
            "a replacement is complete)"
        )
    elif exists(current):
        lines.append(f"current:  {current} (incomplete: no readable manifest.json)")
    marker = read_marker(building)
    if marker is not None:
        resumes = lineage is not None and can_resume(marker, name, lineage, extends_values(config, name))
        lines.append(f"unfinished: {building} ({'resumed' if resumes else 'discarded'} by the next run)")
    if read_manifest_at(previous) is not None:
        lines.append(f"previous: {previous} (restore: python -m pipelines.restore {name})")
    return lines


def plan_dag(config: Config, selected: Sequence[str], forced: set[str]) -> list[StagePlan]:
    """What a submission would do. A stage's fingerprint is predicted from the fingerprints its
    inputs will have (they are config hashes, so they are known before anything runs)."""
    predicted: dict[str, str | None] = {}
    plans = []
    for name in STAGES:
        stage = STAGES[name]
        manifest = read_manifest(config, name)
        current = manifest.get("fingerprint") if manifest else None
        deps = stage_inputs(config, name)
        inputs = (
            [f"{dep}: {stage_dir(config, dep)}" for dep in deps]
            + [f"{key}: {value}" for key in stage.input_paths if (value := config_value(config, key))]
            + [f"config: {', '.join(stage.config_keys)}" if stage.config_keys else "config: none"]
        )
        outputs = [join(stage_dir(config, name), o) for o in (*stage.outputs, "manifest.json")]
        if name not in selected:
            predicted[name] = current
            have = "no output" if manifest is None else "has output"
            plans.append(StagePlan(name, False, False, f"not selected ({have})", inputs, outputs, []))
            continue
        missing = [dep for dep in deps if predicted[dep] is None]
        inputs_now = {dep: predicted[dep] or "" for dep in deps}
        known = {k: v for k, v in predicted.items() if v}
        fingerprint = stage_fingerprint(config, name, inputs_now, known=known)
        if name in forced:
            status = "runs: forced"
        elif missing:
            status = (
                f"runs: partial, without {', '.join(missing)}"
                if stage.partial_inputs
                else f"runs, but needs {', '.join(missing)} output, which is missing and not selected"
            )
        elif current is None:
            status = "runs: no output yet"
        elif current != fingerprint:
            continues = stage.extends and manifest.get("lineage") == stage_fingerprint(
                config, name, inputs_now, exclude=stage.extends, known=known
            )
            status = "runs: continues the current output" if continues else "runs: config or inputs changed"
        else:
            status = "up to date: skipped"
        runs = status.startswith("runs")
        predicted[name] = fingerprint if not missing or stage.partial_inputs else None
        lineage = None if missing else stage_fingerprint(config, name, inputs_now, exclude=stage.extends, known=known)
        plans.append(StagePlan(name, True, runs, status, inputs, outputs, _held(config, name, lineage)))
    return plans


def format_plan(config: Config, plans: list[StagePlan]) -> str:
    lines = [f"DAG for run_dir={config.run_dir} ({' -> '.join(STAGES)}):"]
    holder = read_holder(config.run_dir) if exists(config.run_dir) else None
    if holder is not None:
        lines.append(f"  in use by {holder[0].describe()}")
    for p in plans:
        lines.append(f"  {p.name}: {p.status}")
        lines += [f"      in:  {i}" for i in p.inputs]
        lines += [f"      out: {o}" for o in p.outputs]
        lines += [f"      {h}" for h in p.held]
    return "\n".join(lines)


def run_stage_task(name: str, config: Config, force: bool | str, owner: str, *after: Any) -> dict[str, Any]:
    """Run one stage through the lifecycle, under the driver's lease (`owner`), and record what it
    cost. `force`: this submission's token when the stage is forced (a retry of the task resumes
    what the first attempt began instead of starting over). `after`: the previous stage's result;
    as a task argument it makes Ray start this stage only once that exists."""
    import ray

    setup_logging()

    def reserved() -> tuple[float, float]:
        total, free = ray.cluster_resources(), ray.available_resources()
        return (total.get("CPU", 0.0) - free.get("CPU", 0.0), total.get("GPU", 0.0) - free.get("GPU", 0.0))

    started = time.time()
    with ReservationMeter(reserved) as meter:
        outcome = run_stage(config, name, force=force, owner=owner)
    wall_s = time.time() - started
    if not outcome.skipped:
        write_cost(
            config.run_dir, name, cost_record(outcome.fingerprint, started, wall_s, meter, ray.cluster_resources())
        )
    return {"stage": name, "output": outcome.path, "skipped": outcome.skipped, "wall_s": wall_s}


def run_dag(config: Config, selected: Sequence[str], forced: set[str], owner: str) -> list[dict[str, Any]]:
    """Submit the chain of stage tasks and wait for each in turn; raises StageFailed at the first failure."""
    import ray

    from .ray_runtime import init_ray

    init_ray()
    task = ray.remote(num_cpus=0, max_retries=1)(run_stage_task)
    refs, previous = [], None
    for name in selected:
        after = [] if previous is None else [previous]
        force = owner if name in forced else False
        previous = task.options(name=f"stage:{name}").remote(name, config, force, owner, *after)
        refs.append((name, previous))
    results = []
    for index, (name, ref) in enumerate(refs):
        try:
            result = ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if e.cause is not None else e
            if find_user_error(cause) is None:
                print(str(e), file=sys.stderr, flush=True)
            for _, later in refs[index + 1 :]:
                # the later stages fail at once (their input did): taking their errors marks them
                # handled, or Ray would print the same traceback again as an "Unhandled error"
                with contextlib.suppress(Exception):
                    ray.get(later, timeout=60)
            raise StageFailed(name, cause) from None
        print(
            f"full_run: {name}: {'up to date, skipped' if result['skipped'] else 'done'} in "
            f"{result['wall_s']:.1f} s -> {result['output']}",
            flush=True,
        )
        results.append(result)
    return results


def run_all(config: Config, selected: Sequence[str], forced: set[str]) -> list[dict[str, Any]]:
    """The DAG under the run_dir's lease, held by this process for the whole run."""
    run_dir = check_run_dir(config.run_dir)
    ensure_run_dir(run_dir)
    with hold(run_dir) as lease:
        return run_dag(config, selected, forced, lease.holder.owner)


def build_parser() -> argparse.ArgumentParser:
    parser = build_arg_parser(__doc__.strip().splitlines()[0])
    parser.add_argument("--stages", metavar="A,B", help=f"run only these stages (default: all: {','.join(STAGES)})")
    parser.add_argument("--force", metavar="STAGE", help="rerun this stage and every selected stage after it")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the DAG with each stage's inputs, outputs and whether it is up to date",
    )
    return parser


def preflight(argv: Sequence[str] | None) -> tuple[Config, argparse.Namespace, list[str], set[str]]:
    """Everything checked before anything starts (no Ray, no writes): the config, the stage
    selection, the run_dir and the input paths. Raises UserError."""
    config, args = parse_cli(argv, build_parser())
    selected, forced = select_stages(args.stages, args.force)
    check_run_dir(config.run_dir)
    check_input_paths(config, selected)
    return config, args, selected, forced


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    started = time.time()
    try:
        config, args, selected, forced = preflight(argv)
        print(format_plan(config, plan_dag(config, selected, forced)), flush=True)
        if args.dry_run:
            return 0
        run_all(config, selected, forced)
    except StageFailed as e:
        user_error = find_user_error(e.error)
        error = user_error or e.error
        print(
            f"full_run: FAILED at stage {e.stage} after {time.time() - started:.0f} s: "
            f"{type(error).__name__}: {one_line(error)}\nfull_run: the outputs of the stages before {e.stage} "
            f"are complete and will be reused by the next submission",
            flush=True,
        )
        return 2 if user_error else 1
    except UserError as e:
        return report_user_error("full_run", e)
    print(f"full_run: all stages done in {time.time() - started:.0f} s", flush=True)
    for label, path in [
        ("report.md", join(stage_dir(config, "report"), "report.md")),
        ("pretrained model (transformers format)", join(stage_dir(config, "pretrain"), "hf")),
        ("fine-tuned model (transformers format)", join(stage_dir(config, "finetune"), "best")),
    ]:
        if exists(path):  # a sub-path (--stages) may not have made it
            print(f"full_run: {label}: {path}", flush=True)
    return 0
