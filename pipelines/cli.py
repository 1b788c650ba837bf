"""The command-line entry shared by the stages: logging, config from argv, run, say where."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from .config import RunConfig, parse_cli


def stage_main(run: Callable[[RunConfig], str], description: str, argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    config = parse_cli(argv, description)
    print(f"{description.rstrip('.')}: written to {run(config)}")
