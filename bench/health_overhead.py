"""What training health's per-step check costs on CPU (issue #17, acceptance 6).

    .venv/bin/python bench/health_overhead.py --steps 60 --rounds 5

Trains the tiny preset (2 layer applications, as configs/learning-tiny.yaml) on batches of 16
sequences of 128 through the pipeline's `collate` and `train_step`, alternating rounds with the
check (HealthMonitor.check_step on the step's all-reduced loss and gradient norm, read once
before the update) and without it (train.health.enabled=false), from the same weights and batches
each round, and prints the median step time of each and the overhead. Also checks that the two
arms end with identical parameters (no event: the check changes nothing).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from synthetic_rows import static_rows  # bench/ beside this file: sys.path[0] for a script

from albert_model import AlbertConfig, AlbertForPreTraining
from pipelines.config import TrainSection
from pipelines.config.health import HealthSection
from pipelines.train.batching import collate
from pipelines.train.health import HealthMonitor
from pipelines.train.schedule import build_scheduler
from pipelines.train.step import train_step

SEQ, BATCH, PREDICTIONS, VOCAB = 128, 16, 20, 8000


def batch(step: int) -> dict:
    return collate(static_rows(step, BATCH, VOCAB, PREDICTIONS, (SEQ, SEQ)), PREDICTIONS)


def run(model0: AlbertForPreTraining, batches: list[dict], checked: bool) -> tuple[list[float], AlbertForPreTraining]:
    model = copy.deepcopy(model0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.001)
    scheduler = build_scheduler(optimizer, warmup_steps=10, total_steps=len(batches))
    train = TrainSection(optimizer="adamw", lr=0.001, global_batch_size=BATCH, warmup_steps=10, max_steps=len(batches))
    monitor = HealthMonitor(HealthSection(), train)
    steps = [0]

    def check(metrics) -> bool:
        steps[0] += 1
        return monitor.check_step(steps[0], metrics.loss, metrics.grad_norm)[0] == "apply"

    times = []
    for mb in batches:
        started = time.perf_counter()
        train_step(model, optimizer, scheduler, [mb], 1.0, check if checked else None).get()
        times.append(time.perf_counter() - started)
    return times, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB, num_hidden_layers=2)
    model0 = AlbertForPreTraining(config)
    batches = [batch(s) for s in range(args.steps)]
    times: dict[bool, list[float]] = {False: [], True: []}
    previous: list[torch.Tensor] = []
    for _ in range(args.rounds):
        for checked in (False, True):
            t, model = run(model0, batches, checked)
            times[checked] += t[5:]  # the first steps warm the allocator
            final = [p.detach().clone() for p in model.parameters()]
            if checked:
                same = all(torch.equal(a, b) for a, b in zip(final, previous, strict=True))
                assert same, "the check changed the parameters"
            previous = final
    off, on = statistics.median(times[False]), statistics.median(times[True])
    print("| health checks | median step (ms) | steps timed |\n|---|---:|---:|")
    print(f"| off | {off * 1e3:.2f} | {len(times[False])} |\n| on | {on * 1e3:.2f} | {len(times[True])} |")
    print(f"overhead: {(on / off - 1):+.2%}; parameters identical in every round")


if __name__ == "__main__":
    main()
