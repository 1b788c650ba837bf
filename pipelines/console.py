"""What every process of the product prints: the log format, and an expected error
(pipelines.errors.UserError) as one line on stderr with exit status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

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


__all__ = ["LOG_FORMAT", "guarded", "report_user_error", "setup_logging"]
