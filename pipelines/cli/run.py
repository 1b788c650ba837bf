"""`albert-ray run` (and `python pipelines/full_run.py`, its launcher for `ray job submit`): the
whole job as one Ray DAG (pipelines/stages/dag.py), after every check that needs no Ray.

    albert-ray run [--config FILE] [--stages a,b] [--force STAGE] [--dry-run] [key=value ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from ..config import Config, build_arg_parser, parse_cli
from ..console import report_user_error, setup_logging
from ..errors import UserError, find_user_error, one_line
from ..finetuning.families.checks import check_config
from ..rundir.ownership import check_input_paths, check_run_dir
from ..rundir.registry import STAGES, stage_dir
from ..stages.dag import RunDirView, StageFailed, format_plan, plan_dag, run_all, select_stages
from ..storage import exists, join

DESCRIPTION = "The whole job as one Ray DAG: vocab -> data -> pretrain -> finetune -> (distill) -> (predict) -> report."


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = build_arg_parser(DESCRIPTION)
    parser.prog = prog or parser.prog
    parser.add_argument("--stages", metavar="A,B", help=f"run only these stages (default: all: {','.join(STAGES)})")
    parser.add_argument("--force", metavar="STAGE", help="rerun this stage and every selected stage after it")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the DAG with each stage's inputs, outputs and whether it is up to date",
    )
    return parser


def preflight(
    argv: Sequence[str] | None, prog: str | None = None
) -> tuple[Config, argparse.Namespace, list[str], set[str]]:
    """Everything checked before anything starts (no Ray, no writes): the config (the task
    families' rules too), the stage selection, the run_dir and the input paths. Raises UserError."""
    config, args = parse_cli(argv, build_parser(prog))
    check_config(config)
    selected, forced = select_stages(args.stages, args.force, config)
    check_run_dir(config.run_dir)
    check_input_paths(config, selected)
    return config, args, selected, forced


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    setup_logging()
    started = time.time()
    try:
        config, args, selected, forced = preflight(argv, prog)
        view = RunDirView.read(config.run_dir)  # the interrupted swap's journal, read once
        print(format_plan(config, plan_dag(config, selected, forced, view), view), flush=True)
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
        return report_user_error(prog or "full_run", e)
    print(f"full_run: all stages done in {time.time() - started:.0f} s", flush=True)
    for label, path in [
        ("report.md", join(stage_dir(config, "report"), "report.md")),
        ("pretrained model (transformers format)", join(stage_dir(config, "pretrain"), "hf")),
        ("fine-tuned model (transformers format)", join(stage_dir(config, "finetune"), "best")),
    ]:
        if exists(path):  # a sub-path (--stages) may not have made it
            print(f"full_run: {label}: {path}", flush=True)
    return 0


__all__ = ["build_parser", "main", "preflight"]
