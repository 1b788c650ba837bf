"""The entry points: `albert-ray` (command.py; `python -m pipelines.cli` where it is not installed),
`run` (run.py), one command per stage (`stage_main` below: logging, config from argv and checked
against the task families, run, say where), `restore`, `local`. An expected error
(pipelines.errors.UserError) is one line on stderr and exit status 2 (pipelines/console.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import build_arg_parser, parse_cli
from ..console import guarded, report_user_error, setup_logging
from ..finetuning.families.checks import check_config


def stage_main(name: str, description: str, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """`albert-ray STAGE [--config F] [--force] [key=value ...]`; returns the exit status."""
    from ..rundir.lifecycle import run_stage

    setup_logging()
    prog = prog or f"albert-ray {name}"
    parser = build_arg_parser(description)
    parser.prog = prog
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even when the output is up to date (an unfinished pretraining then starts over instead of resuming)",
    )

    def main() -> int:
        config, args = parse_cli(argv, parser)
        check_config(config)
        outcome = run_stage(config, name, force=args.force)
        print(f"{description.rstrip('.')}: {'up to date in' if outcome.skipped else 'written to'} {outcome.path}")
        return 0

    return guarded(prog, main)


__all__ = ["guarded", "report_user_error", "setup_logging", "stage_main"]
