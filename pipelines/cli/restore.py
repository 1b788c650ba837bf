"""`albert-ray restore STAGE`: make a stage's previous output current again.

A stage that replaces its output keeps the one it replaced in `{run_dir}/_previous/<stage>/`.
This swaps the two (so running it twice undoes it), under the run_dir's lease, through the same
journaled swap as a commit. The stages after it become stale when the restored output's
fingerprint differs from what they were made from; a run with a config whose fingerprint differs
from the restored output's rebuilds it (keeping the restored one as previous again).

    albert-ray restore pretrain [--config F] [key=value ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..config import parse_cli
from ..console import guarded, setup_logging
from ..finetuning.families.checks import check_config
from ..rundir.generations import restore
from ..rundir.registry import STAGES


def main(argv: Sequence[str] | None = None, prog: str = "albert-ray restore") -> int:
    setup_logging()
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=list(STAGES), help="the stage whose previous output becomes current")
    parser.add_argument(
        "--config", metavar="FILE", action="append", help="YAML config naming the run_dir (as for the stages)"
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides, e.g. run_dir=...")

    def run() -> int:
        config, args = parse_cli(argv, parser)
        check_config(config)
        print(
            f"restored: {restore(config, args.stage)} is the previous output again; the replaced one is in "
            f"_previous/{args.stage}",
            flush=True,
        )
        return 0

    return guarded(prog, run)
