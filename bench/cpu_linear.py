"""CPU inference's linear layers, each way albert_model/kernels.py could compute them, side by side in
one run on this CPU: what `kernels.ONEDNN_FASTER` decides (oneDNN's fused call where torch dispatches
AVX-512, MKL's product with the activation in place elsewhere), measured rather than assumed on a
new CPU.

- per layer, at the encoder's shapes (rows = batch x sequence): `F.linear` then the activation (a
  second output, what autograd's path runs), oneDNN's `_linear_pointwise` with the bias and the
  activation fused, and `F.linear` with the activation written over its output in place;
- the QA encoder's forward over full windows, the two CPU inference paths and the autograd path's
  linear layers (no mask either way), the sides alternating each round, with the largest logit
  difference against the first.

    python bench/cpu_linear.py                       # base's shapes, 16 windows of 256, 2 threads
    python bench/cpu_linear.py --preset tiny --rounds 8
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import time
from collections.abc import Callable
from contextlib import contextmanager
from unittest import mock

import torch


def median_ms(run: Callable[[], object], rounds: int) -> float:
    """The median of `rounds` timed calls of `run`, after one untimed, in milliseconds."""
    run()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


@contextmanager
def path(name: str):
    """albert_model.kernels taking one CPU inference path: 'oneDNN fused', 'in place' or 'autograd's'."""
    from albert_model import kernels

    if name == "autograd's":
        with mock.patch.object(kernels, "fusable", lambda *a: False):
            yield
        return
    with mock.patch.object(kernels, "ONEDNN_FASTER", name == "oneDNN fused"):
        yield


PATHS = ("oneDNN fused", "in place", "autograd's")


def layers(config, rows: int, rounds: int) -> list[dict]:
    """Each of the layer's linear products (q/k/v, the attention's output, the FFN's two) each way."""
    from albert_model import kernels
    from albert_model.model import build_activation

    h, i = config.hidden_size, config.intermediate_size
    activation = build_activation(config.hidden_act)
    out = []
    for name, k, n, act in [
        ("q, k, v", h, 3 * h, None),
        ("attention output", h, h, None),
        ("FFN first, activation", h, i, activation),
        ("FFN second", i, h, None),
    ]:
        x, w, b = torch.randn(rows, k), torch.randn(n, k) * 0.02, torch.randn(n)
        row = {"layer": name, "rows": rows, "k": k, "n": n}
        with torch.inference_mode():
            for side in PATHS:
                with path(side):
                    row[side] = median_ms(functools.partial(kernels.linear, x, w, b, act), rounds)
        out.append(row)
    return out


def forward(config, batch: int, seq: int, rounds: int) -> dict:
    """The QA encoder's forward each way, the sides alternating each round."""
    from albert_model.model import AlbertForQuestionAnswering

    model = AlbertForQuestionAnswering(config).eval()
    ids = torch.randint(5, config.vocab_size, (batch, seq))
    types, mask = torch.zeros_like(ids), torch.ones_like(ids)
    times: dict[str, list[float]] = {side: [] for side in PATHS}
    logits: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        for round_ in range(rounds + 1):  # the first round warms up, untimed
            for side in PATHS:
                with path(side):
                    start = time.perf_counter()
                    logits[side] = model(ids, types, mask).start_logits
                    if round_:
                        times[side].append(time.perf_counter() - start)
    result = {side: sorted(t)[len(t) // 2] * 1e3 for side, t in times.items()}
    first = logits[PATHS[0]]
    result["max_logit_difference"] = max(float((logits[s] - first).abs().max()) for s in PATHS)
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base")
    parser.add_argument("--batch", type=int, default=16, help="windows per forward")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)

    from albert_model import AlbertConfig, kernels

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = AlbertConfig.from_preset(args.preset, vocab_size=8000)
    result = {
        "preset": args.preset,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "onednn_faster": kernels.ONEDNN_FASTER,
        "threads": args.threads,
        "layers": layers(config, args.batch * args.seq, args.rounds),
        "forward": forward(config, args.batch, args.seq, args.rounds),
    }
    print(
        f"{args.preset}, {args.batch} x {args.seq}, {args.threads} threads, CPU capability {result['cpu_capability']}"
    )
    print(f"| layer | {' | '.join(PATHS)} (ms) |")
    for row in result["layers"]:
        print(
            f"| {row['layer']}: {row['rows']} x {row['k']} -> {row['n']} | "
            + " | ".join(f"{row[s]:.2f}" for s in PATHS)
        )
    fwd = result["forward"]
    print("| the encoder's forward | " + " | ".join(f"{fwd[s]:.1f}" for s in PATHS))
    print(f"largest logit difference: {fwd['max_logit_difference']:.2e}")
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
