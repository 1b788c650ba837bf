"""`albert-ray`: the one command, with a subcommand for everything a user runs (as litgpt has one
`litgpt`). Each subcommand is the same code as before, with its own `--help`:

    albert-ray run [--config F] [--stages a,b] [--force STAGE] [--dry-run] [key=value ...]
    albert-ray vocab|data|pretrain|finetune|distill|predict|report [--config F] [--force] [key=value ...]
    albert-ray restore STAGE [--config F] [key=value ...]
    albert-ray local start|stop|status|run [...]
    albert-ray export onnx MODEL_DIR OUTPUT.onnx [--opset N] [--force] [--no-check]
    albert-ray serve MODEL_DIR [--host H] [--port P] [--route /predict] [--replicas N] [...]

`ray job submit --working-dir . -- python pipelines/full_run.py ...` stays the way to submit the
whole job to a cluster: it runs the same `run` from a checkout, where no install is needed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

PROG = "albert-ray"


def _run(argv: list[str]) -> int:
    from .run import main

    return main(argv, prog=f"{PROG} run")


def _stage(name: str) -> Callable[[list[str]], int]:
    def run(argv: list[str]) -> int:
        from ..rundir.registry import STAGES
        from . import stage_main

        return stage_main(name, f"The {name} stage: {STAGES[name].summary}.", argv, prog=f"{PROG} {name}")

    return run


def _restore(argv: list[str]) -> int:
    from .restore import main

    return main(argv, prog=f"{PROG} restore")


def _local(argv: list[str]) -> int:
    from .local_cluster import main

    return main(argv, prog=f"{PROG} local")


def _export(argv: list[str]) -> int:
    from ..export.command import main

    return main(argv, prog=f"{PROG} export")


def _serve(argv: list[str]) -> int:
    from .serve import main

    return main(argv, prog=f"{PROG} serve")


def subcommands() -> dict[str, tuple[str, Callable[[list[str]], int]]]:
    """name -> (one line of help, handler)."""
    from ..rundir.registry import STAGES

    table = {"run": ("the whole job as one Ray DAG (" + " -> ".join(STAGES) + "): pipelines/full_run.py", _run)}
    for name, stage in STAGES.items():
        table[name] = (f"one stage: {stage.summary}", _stage(name))
    table["restore"] = ("make a stage's previous output (_previous/<stage>) current again", _restore)
    table["local"] = ("this checkout's local Ray head: start | stop | status | run (make run)", _local)
    table["export"] = ("a trained model folder to another format: onnx MODEL_DIR OUTPUT.onnx", _export)
    table["serve"] = ("a fine-tuned model behind an HTTP endpoint on Ray Serve, until Ctrl-C", _serve)
    return table


def usage() -> str:
    table = subcommands()
    width = max(map(len, table))
    lines = [
        f"usage: {PROG} <command> [--help] [arguments]",
        "",
        "ALBERT pretraining and fine-tuning on Ray: from raw text to a tuned model.",
        "",
        "commands:",
        *(f"  {name:<{width}}  {summary}" for name, (summary, _) in table.items()),
        "",
        f"run and the stage commands take --config FILE and section.key=value overrides; `{PROG} <command> --help`"
        " lists each command's arguments.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    table = subcommands()
    if argv[0] not in table:
        print(f"{PROG}: error: unknown command {argv[0]!r}; the commands are {', '.join(table)}", file=sys.stderr)
        return 2
    return table[argv[0]][1](argv[1:])


__all__ = ["main", "subcommands", "usage"]
