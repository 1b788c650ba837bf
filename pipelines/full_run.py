"""`python pipelines/full_run.py`: vocab -> data -> pretrain -> finetune -> (distill) -> (predict) -> report
as one Ray DAG (pipelines/stages/dag.py). This is the command `ray job submit --working-dir . -- python
pipelines/full_run.py` runs, as a file from the checkout; `python -m pipelines.full_run` works too.

    python pipelines/full_run.py [--config FILE] [--stages a,b] [--force STAGE] [--dry-run] [key=value ...]
"""

import sys
from pathlib import Path


def launch() -> int:
    if not __package__:  # run as a file: the checkout's root on the path, not this folder (its modules
        sys.path[0] = str(Path(__file__).resolve().parents[1])  # would shadow top-level ones: config, data)
    from pipelines.cli.run import main

    return main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(launch())
