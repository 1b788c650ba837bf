"""Helpers for the test processes that torch.multiprocessing starts."""

import multiprocessing
import os
import sys

import torch.multiprocessing as mp


def start_processes(target, args: tuple, world: int, module: str) -> None:
    """`world` fresh processes running target(rank, *args), as torch's spawn starts them, but forked
    from a server that imported `module` (the test module: torch, the loop) once, where a spawned
    process imported it anew (~3 s of each process's start). The server runs no torch work, so
    forking it is safe; its processes get the server's environment, and no test that uses this
    passes anything through the environment."""
    multiprocessing.set_forkserver_preload([module])
    mp.start_processes(target, args=args, nprocs=world, start_method="forkserver")


def exit_now() -> None:
    """End a spawned process that finished its work, skipping interpreter finalisation."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
