"""The command-line entry shared by the stages: logging, config from argv, run, say where."""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from .config import RunConfig, build_arg_parser, parse_cli


def stage_main(run: Callable[..., str], description: str, argv: Sequence[str] | None = None) -> None:
    """`python -m pipelines.STAGE [--config F] [--force] [key=value ...]`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    parser = build_arg_parser(description)
    parser.add_argument("--force", action="store_true", help="run even when the output is up to date")
    config = parse_cli(argv, description, parser)
    print(f"{description.rstrip('.')}: written to {run(config, force=parser.parsed.force)}")
