"""The command-line entry shared by the stages: logging, config from argv, run, say where; an
expected error (pipelines.errors.UserError) is one line on stderr and exit status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence

from .config import build_arg_parser, parse_cli
from .errors import find_user_error, one_line

LOG_FORMAT = "%(asctime)s %(name)s: %(message)s"


def setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)


def report_user_error(prog: str, error: BaseException) -> int:
    """Print an expected error as one line (no traceback) and return exit status 2."""
    print(f"{prog}: error: {one_line(error)}", file=sys.stderr, flush=True)
    return 2


def guarded(prog: str, main: Callable[[], int]) -> int:
    """Run `main`; an expected error anywhere under it (a Ray task's included) ends as one line and 2."""
    try:
        return main()
    except Exception as e:
        user_error = find_user_error(e)
        if user_error is None:
            raise
        return report_user_error(prog, user_error)


def stage_main(name: str, description: str, argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """`albert-ray STAGE [--config F] [--force] [key=value ...]`; returns the exit status."""
    from .lifecycle import run_stage

    setup_logging()
    prog = prog or f"pipelines.{name}"
    parser = build_arg_parser(description)
    parser.prog = prog
    parser.add_argument(
        "--force",
        action="store_true",
        help="run even when the output is up to date (an unfinished pretraining then starts over instead of resuming)",
    )

    def main() -> int:
        config, args = parse_cli(argv, parser)
        outcome = run_stage(config, name, force=args.force)
        print(f"{description.rstrip('.')}: {'up to date in' if outcome.skipped else 'written to'} {outcome.path}")
        return 0

    return guarded(prog, main)


__all__ = ["guarded", "report_user_error", "setup_logging", "stage_main"]
