"""Where question-answering prediction spends its time: each side of bench/qa_predict_speed.py (the QA
family's inference and the plain transformers loop, same export, questions and threads) run once
under torch's profiler after a warm-up, its wall time split into torch's operators by kind (the
linear layers, attention, LayerNorm, the residual adds and the rest of the elementwise work, the
embeddings' lookups) and what runs outside them (tokenising and windowing, collating, the answer
search: Python and the tokenizers). Then the encoder's forward alone on --batch-size full windows
(the common batch: most windows of these contexts are full) with albert_model/kernels.py's
inference kernels and without them (F.linear and the mask, the autograd path's kernels), the two
alternating over --rounds rounds (median).

    python bench/qa_predict_profile.py --preset tiny --rows 100
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/'s modules, as a script sees them
from qa_predict_speed import default_spiece_dir, load_ours, load_transformers, make_model, questions  # noqa: E402

KINDS = {
    "linear layers": ("mkldnn::_linear_pointwise", "aten::addmm", "aten::mm", "aten::bmm"),
    "attention (SDPA)": ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_softmax"),
    "LayerNorm": ("aten::native_layer_norm",),
    "elementwise (residual adds, GELU, bias copies)": (
        "aten::add",
        "aten::add_",
        "aten::copy_",
        "aten::gelu",
        "aten::mul",
        "aten::pow",
        "aten::tanh",
    ),
    "embedding lookups": ("aten::index_select", "aten::embedding"),
}


def split(answer, rows: list[dict]) -> dict[str, float]:
    """Seconds of one call of `answer` on `rows` by kind; "outside torch's operators" is the wall
    time not inside any operator counted (each operator's self time, on the calling thread)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        started = time.perf_counter()
        answer(rows)
        wall = time.perf_counter() - started
    self_s = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    out = {kind: sum(self_s.get(op, 0.0) for op in ops) for kind, ops in KINDS.items()}
    out["other torch operators"] = sum(self_s.values()) - sum(out.values())
    out["outside torch's operators (tokenising, windows, collating, answer search)"] = wall - sum(self_s.values())
    return {"wall": wall} | out


def kernels_ab(preset: str, batch: int, rounds: int) -> dict[str, float]:
    """Seconds of the QA model's forward on `batch` full 256-token windows with the inference kernels
    and without (median of `rounds`, alternating), and the largest logit difference."""
    from albert_model import AlbertConfig, kernels
    from albert_model.model import AlbertForQuestionAnswering

    torch.manual_seed(0)
    model = AlbertForQuestionAnswering(AlbertConfig.from_preset(preset, vocab_size=1000)).eval()
    ids = torch.randint(5, 1000, (batch, 256))
    inputs = {"input_ids": ids, "token_type_ids": (torch.arange(256) >= 20).long().expand(batch, -1)}
    inputs["attention_mask"] = torch.ones_like(ids)

    def without():
        off = (mock.patch.object(kernels, name, lambda *a: False) for name in ("fusable", "without_padding"))
        with next(off), next(off):
            return model(**inputs)

    sides = {"with kernels": lambda: model(**inputs), "without": without}
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    with torch.inference_mode():
        outputs = {name: forward() for name, forward in sides.items()}  # and a warm-up
        for r in range(rounds):
            for name in list(sides)[:: 1 if r % 2 == 0 else -1]:
                started = time.perf_counter()
                sides[name]()
                seconds[name].append(time.perf_counter() - started)
    a, b = outputs.values()
    diff = max((a.start_logits - b.start_logits).abs().max().item(), (a.end_logits - b.end_logits).abs().max().item())
    return {name: float(np.median(s)) for name, s in seconds.items()} | {"max_logit_difference": diff}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--spiece", help="a folder with spiece.model (default: one trained on the embedded corpus)")
    parser.add_argument("--rows", type=int, default=100, help="questions")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--padding", default="max_length", choices=["max_length", "longest"], help="transformers'")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the forward with and without the kernels")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        spiece_dir = Path(args.spiece) if args.spiece else Path(default_spiece_dir(root))
        model = make_model(root / "model", args.preset, spiece_dir, 256, 64, 128)
        rows = questions(model, args.rows)
        sides = {
            "ours": load_ours(model, args.batch_size),
            "transformers": load_transformers(model, args.batch_size, args.padding),
        }
        for answer in sides.values():
            answer(rows[: args.batch_size])
        result = {name: split(answer, rows) for name, answer in sides.items()}
    for name, seconds in result.items():
        print(f"{name}: {seconds['wall']:.2f} s")
        for kind, s in seconds.items():
            if kind != "wall":
                print(f"  {kind}: {100 * s / seconds['wall']:.1f}%")
    ab = kernels_ab(args.preset, args.batch_size, args.rounds)
    speedup = ab["without"] / ab["with kernels"]
    print(f"forward of {args.batch_size} full windows: {ab} ({speedup:.2f}x with the kernels)")
    return result | {"kernels": ab}


if __name__ == "__main__":
    main()
