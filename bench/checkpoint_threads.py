"""What a checkpoint does to the training steps after it, on a one-rank gloo group as on a Ray Train
worker: our save (DCP with `no_dist` for one rank, pipelines/train/checkpoint.py) against DCP's
default distributed save, each in a fresh process.

    .venv/bin/python bench/checkpoint_threads.py --steps 150

Each arm trains the tiny preset (2 layer applications, batches of 16 x 128, AdamW) on 2 threads in
a thread of its own under a one-rank gloo group, times `--steps` steps, saves a checkpoint, and
times `--steps` more; it prints the median step times and the voluntary context switches per step
(an OpenMP helper that sleeps and is woken at every parallel region instead of spinning), and the
process's thread count before and after the save.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import torch


def switches() -> int:
    total = 0
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/status") as f:
            total += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
    return total


def arm(distributed_save: bool, steps: int) -> dict:
    """One arm, in this process: the training thread's steps around one checkpoint."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.optim.lr_scheduler import LambdaLR

    from albert_model import AlbertConfig, AlbertForPreTraining
    from pipelines.train.checkpoint import save_checkpoint

    dist.init_process_group("gloo", rank=0, world_size=1)
    result: dict = {}

    def train() -> None:
        torch.set_num_threads(2)
        torch.manual_seed(0)
        model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=8000, num_hidden_layers=2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        ids = torch.randint(5, 8000, (16, 128))
        positions = torch.randint(0, 128, (16, 20))

        def timed(n: int) -> tuple[float, float]:
            times, before = [], switches()
            for _ in range(n):
                start = time.perf_counter()
                out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), positions)
                (out.mlm_logits.logsumexp(-1).mean() + out.sop_logits.logsumexp(-1).mean()).backward()
                optimizer.step()
                optimizer.zero_grad()
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1000, (switches() - before) / n

        timed(10)  # warm-up
        result["before_ms"], result["before_switches"] = timed(steps)
        threads = len(os.listdir("/proc/self/task"))
        with tempfile.TemporaryDirectory() as directory:
            if distributed_save:
                model_state, optimizer_state = get_state_dict(model, optimizer)
                dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=directory)
            else:
                save_checkpoint(directory, model, optimizer, LambdaLR(optimizer, lambda s: 1.0), 0)
        result["threads_added"] = len(os.listdir("/proc/self/task")) - threads
        result["after_ms"], result["after_switches"] = timed(steps)

    thread = threading.Thread(target=train)
    thread.start()
    thread.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--arm", choices=["ours", "dcp-distributed"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(arm(args.arm == "dcp-distributed", args.steps)))
        return
    print(
        "| save | step before (ms) | step after (ms) | voluntary switches per step, before -> after | threads added |"
    )
    print("|---|---|---|---|---|")
    for name in ("ours", "dcp-distributed"):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
        out = subprocess.run(
            [sys.executable, __file__, "--arm", name, "--steps", str(args.steps)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"| {name} | {r['before_ms']:.1f} | {r['after_ms']:.1f} | "
            f"{r['before_switches']:.0f} -> {r['after_switches']:.0f} | {r['threads_added']} |"
        )


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
