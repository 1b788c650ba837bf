"""The whole product as one Ray DAG: vocab -> data -> pretrain -> finetune -> (predict) -> report (the command
is `albert-ray run`, pipelines/cli/run.py; `python pipelines/full_run.py` launches it).

Each stage is a Ray task that reserves no CPU (the stage's own Ray Data / Train / Tune work reserves
what it needs) and runs the stage through the shared lifecycle (pipelines/rundir/lifecycle.py), the same
code as its standalone command. The tasks are chained through ObjectRefs, so a stage starts when
the one before it has returned and a failure stops everything after it. The driver holds the
run_dir's lease for the whole DAG (a second run on the same run_dir stops at once). Every stage
skips itself when its output is up to date (pipelines/rundir/registry.py), so submitting the job again
resumes where the last one stopped.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config import Config
from ..console import setup_logging
from ..errors import ConfigError, find_user_error
from ..rundir.costs import ReservationMeter, cost_record, write_cost
from ..rundir.generations import SWAP, building_dir, pending_moves, previous_dir
from ..rundir.lease import hold, read_holder
from ..rundir.lifecycle import can_resume, extends_values, run_stage
from ..rundir.ownership import BUILDING, PREVIOUS, check_run_dir, ensure_run_dir, read_marker
from ..rundir.registry import (
    STAGES,
    UNIT_MANIFEST,
    config_value,
    enabled,
    read_manifest_at,
    stage_dir,
    stage_fingerprint,
    stage_inputs,
    unit_configs,
)
from ..storage import exists, join, path_inside, read_json

log = logging.getLogger(__name__)


class StageFailed(RuntimeError):
    def __init__(self, stage: str, error: BaseException):
        super().__init__(f"stage {stage} failed: {type(error).__name__}: {error}")
        self.stage, self.error = stage, error


def unneeded(config: Config, stages: Sequence[str]) -> dict[str, str]:
    """Of `stages` (in DAG order), those whose output none of the others needs: each stage that reads
    it reads a path set in its place instead (finetune.pretrained for pretrain's output), does
    without it (the report), or is itself unneeded. Stage -> the key that set a path in its place."""
    dropped: dict[str, str] = {}
    for name in reversed(stages):
        readers = [s for s in stages if s not in dropped and name in STAGES[s].inputs]
        replacing = [STAGES[s].input_override[1] for s in readers if name not in stage_inputs(config, s)]
        gone = [dropped[s] for s in stages if s in dropped and name in STAGES[s].inputs]
        needs = [s for s in readers if name in stage_inputs(config, s) and not STAGES[s].partial_inputs]
        # a path set in the output's place that lies inside that very output (finetune.pretrained=
        # {run_dir}/pretrain/hf) is made by the stage it replaces
        needs += [key for key in replacing if path_inside(stage_dir(config, name), config_value(config, key))]
        if (replacing or gone) and not needs:
            dropped[name] = (replacing + gone)[0]
    return dropped


def select_stages(stages: str | None, force: str | None, config: Config | None = None) -> tuple[list[str], set[str]]:
    """The stages to run, in DAG order, and those forced: `force` and every selected stage after it.
    With a config, the default selection leaves out the stages it does not enable (predict without
    predict.input) and those none of the others needs (vocab, data and pretrain when
    finetune.pretrained names the model to fine-tune), and naming a stage it does not enable is an
    error saying what to set."""
    order = list(STAGES)
    if stages is None:
        selected = [s for s in order if config is None or enabled(config, s)]
        if config is not None:
            selected = [s for s in selected if s not in unneeded(config, selected)]
    else:
        selected = [s.strip() for s in stages.split(",") if s.strip()]
    unknown = [s for s in selected if s not in STAGES]
    if unknown or not selected:
        raise ConfigError(f"--stages {stages!r}: unknown or no stage; the stages are {','.join(order)}")
    off = [s for s in selected if config is not None and not enabled(config, s)]
    if off:
        raise ConfigError(
            f"--stages {stages!r}: {off[0]} needs {STAGES[off[0]].enabled_by} (it is null in this config)"
        )
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


@dataclass(frozen=True)
class RunDirView:
    """The run_dir as the next run will find it once it has finished an interrupted swap: each stage
    folder's current place (`moved`), and the journal itself."""

    run_dir: str
    journal: dict[str, Any] | None
    moved: dict[str, str | None]

    @classmethod
    def read(cls, run_dir: str) -> RunDirView:
        journal, moved = pending_moves(run_dir) if exists(run_dir) else (None, {})
        return cls(run_dir, journal, moved)

    def folder(self, rel: str) -> str | None:
        """Where `rel`'s content is now (None: nothing will be there)."""
        now = self.moved.get(rel, rel)
        return None if now is None else join(self.run_dir, now)

    def manifest(self, rel: str) -> dict[str, Any] | None:
        folder = self.folder(rel)
        return None if folder is None else read_manifest_at(folder)


def _held(
    config: Config, view: RunDirView, name: str, lineage: str | None, fingerprint: str, forced: bool
) -> tuple[list[str], bool]:
    """What the run_dir holds for the stage, and whether the next run swaps in a complete build
    instead of building (a run killed between its manifest and its swap)."""
    run_dir = view.run_dir
    current, building, previous = join(run_dir, name), building_dir(run_dir, name), previous_dir(run_dir, name)
    lines, swaps_in = [], False
    manifest = view.manifest(name)
    if manifest is not None:
        steps = f", {manifest['steps']} steps" if "steps" in manifest else ""
        lines.append(
            f"current:  {current} (complete{steps}, committed {manifest.get('committed', '?')}; kept until "
            "a replacement is complete)"
        )
    elif (folder := view.folder(name)) is not None and exists(folder):
        lines.append(f"current:  {current} (incomplete: no readable manifest.json)")
    building_now = view.folder(f"{BUILDING}/{name}")
    marker = read_marker(building_now) if building_now else None
    if marker is not None:
        built = read_manifest_at(building_now)
        if built is not None and built.get("fingerprint") == fingerprint and not forced:
            swaps_in = True
            what = "complete, not swapped in yet: the next run swaps it in without building again"
        elif built is None and lineage is not None and can_resume(marker, name, lineage, extends_values(config, name)):
            what = "unfinished: resumed by the next run"
        elif built is None and STAGES[name].resumable:
            what = f"unfinished: set aside to {previous}.unfinished by the next run"
        else:
            what = f"{'complete' if built else 'unfinished'}, another config or forced: discarded by the next run"
        lines.append(f"building: {building} ({what})")
    if view.manifest(f"{PREVIOUS}/{name}") is not None:
        lines.append(f"previous: {previous} (restore: albert-ray restore {name})")
    return lines, swaps_in


def plan_dag(
    config: Config, selected: Sequence[str], forced: set[str], view: RunDirView | None = None
) -> list[StagePlan]:
    """What a submission would do. A stage's fingerprint is predicted from the fingerprints its
    inputs will have (they are config hashes, so they are known before anything runs)."""
    predicted: dict[str, str | None] = {}
    plans = []
    view = view or RunDirView.read(config.run_dir)
    for name in STAGES:
        stage = STAGES[name]
        manifest = view.manifest(name)
        current = manifest.get("fingerprint") if manifest else None
        deps = stage_inputs(config, name)
        inputs = (
            [f"{dep}: {stage_dir(config, dep)}" for dep in deps]
            + [f"{key}: {value}" for key in stage.input_paths if (value := config_value(config, key))]
            + [f"config: {', '.join(stage.config_keys)}" if stage.config_keys else "config: none"]
        )
        units = [f"{unit}/" for unit in unit_configs(config, name)]
        outputs = [join(stage_dir(config, name), o) for o in (*(units or stage.outputs), "manifest.json")]
        if stage.publish and (published := config_value(config, stage.publish)):
            outputs.append(f"{published} (a copy: {stage.publish})")
        if name not in selected:
            predicted[name] = current
            have = "no output" if manifest is None else "has output"
            why = "not selected" if enabled(config, name) else f"not configured: {stage.enabled_by} is null"
            if (key := unneeded(config, [s for s in STAGES if enabled(config, s)]).get(name)) is not None:
                why = f"not needed: {key} is set, so no stage reads its output"
            plans.append(StagePlan(name, False, False, f"{why} ({have})", inputs, outputs, []))
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
        if status.startswith("runs") and not missing and unit_configs(config, name):
            status += f" ({_unit_plan(config, view, name, inputs_now, known, name in forced)})"
        predicted[name] = fingerprint if not missing or stage.partial_inputs else None
        lineage = None if missing else stage_fingerprint(config, name, inputs_now, exclude=stage.extends, known=known)
        held, swaps_in = _held(config, view, name, lineage, fingerprint, name in forced)
        if swaps_in and status.startswith("runs") and not missing:
            status = "runs: swaps in its complete build (made by a run stopped before its swap), no rebuild"
        plans.append(StagePlan(name, True, status.startswith("runs"), status, inputs, outputs, held))
    return plans


def _unit_plan(
    config: Config, view: RunDirView, name: str, inputs: dict[str, str], known: dict[str, str], forced: bool
) -> str:
    """Which of the stage's units (an evaluation suite's tasks) a run redoes and which it carries
    over from the current output unchanged."""
    folder = view.folder(name)
    redo, keep = [], []
    for unit, unit_config in unit_configs(config, name).items():
        try:
            done = read_json(join(folder, unit, UNIT_MANIFEST)) if folder and not forced else None
        except ValueError:
            done = None
        same = done and done.get("fingerprint") == stage_fingerprint(unit_config, name, inputs, known=known)
        (keep if same else redo).append(unit)
    parts = [f"redoes {', '.join(redo)}"] if redo else []
    return "; ".join(parts + ([f"carries over {', '.join(keep)}"] if keep else [])) or "no units"


def format_plan(config: Config, plans: list[StagePlan], view: RunDirView) -> str:
    lines = [f"DAG for run_dir={config.run_dir} ({' -> '.join(STAGES)}):"]
    holder = read_holder(config.run_dir) if exists(config.run_dir) else None
    if holder is not None:
        why = holder[0].why_stale()
        lines.append(
            f"  in use by {holder[0].describe()}"
            if why is None
            else f"  lease: left by {holder[0].describe()}; no longer held ({why}): the next run takes it over"
        )
    journal = view.journal
    if journal is not None:
        what = f"{journal.get('action')} of the {journal.get('stage')} stage"
        lines.append(
            f"  interrupted {what} ({SWAP}, {journal['done']} of {len(journal['ops'])} steps done): "
            "the next run finishes it first; the stages below are shown as it will leave them"
            if journal.get("fenced", True)
            else f"  unconfirmed {what} ({SWAP}) of a run that lost its lease: the next run removes it (none of it "
            "was done)"
        )
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
