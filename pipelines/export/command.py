"""`albert-ray export onnx MODEL_DIR OUTPUT.onnx`: a transformers-format ALBERT folder as one ONNX file,
its shared layer stored once, then checked against PyTorch on onnxruntime (docs/model.md#onnx).

    albert-ray export onnx MODEL_DIR OUTPUT.onnx [--embedding] [--opset N] [--quantize int8] [--fuse-attention]
        [--force] [--no-check]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..console import guarded

# onnxruntime's CPU kernels against PyTorch's, in float32 (measured: 3e-8 to 2.4e-6, docs/BENCHMARKS.md).
TOLERANCE = 1e-4
# an int8 export's predictions (argmax) against PyTorch's on random token ids: measured 97.8% to 100%
# on 12-layer tiny models of every head (docs/model.md#int8); on text, closer to 100%.
AGREEMENT = 0.95
# an int8 encoder export's (--embedding) mean-pooled vectors against PyTorch's, the least cosine
# similarity on random token ids: measured 0.99994 on tiny models (docs/model.md#int8).
SIMILARITY = 0.99


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Export a transformers-format ALBERT folder to another format: onnx."
    )
    formats = parser.add_subparsers(dest="format", required=True, metavar="FORMAT")
    onnx = formats.add_parser(
        "onnx",
        help="ONNX for onnxruntime and other runtimes",
        description="Export to ONNX: inputs input_ids, attention_mask, token_type_ids (int64, dynamic batch and "
        "sequence axes); outputs by architecture: logits (classification, token classification, multiple "
        "choice), start_logits and end_logits (question answering), last_hidden_state and pooler_output "
        "(pretraining and the bare encoder); with --embedding, the encoder's last_hidden_state alone.",
    )
    onnx.add_argument("model_dir", metavar="MODEL_DIR", help="a folder with config.json and model.safetensors")
    onnx.add_argument("output", metavar="OUTPUT", help="the .onnx file to write")
    onnx.add_argument(
        "--opset", type=int, metavar="N", help="ONNX opset version, 18 to 22 (default: torch's exporter's, 20)"
    )
    onnx.add_argument(
        "--embedding",
        action="store_true",
        help="export the folder's encoder alone, whatever its head (output last_hidden_state), for sentence "
        "embeddings (predict.output_kind=embedding, serve's POST <route>/embed; docs/model.md#onnx)",
    )
    onnx.add_argument(
        "--quantize",
        choices=["int8"],
        help="int8 weights for CPU inference (dynamic quantization of the activations; docs/model.md#int8)",
    )
    onnx.add_argument(
        "--fuse-attention",
        action="store_true",
        help="the attention as onnxruntime's MultiHeadAttention op: ~10%% faster in onnxruntime, a file only "
        "onnxruntime loads (docs/model.md#int8)",
    )
    onnx.add_argument("--force", action="store_true", help="replace OUTPUT if it exists")
    onnx.add_argument(
        "--no-check", action="store_true", help="skip the comparison with PyTorch on onnxruntime after writing"
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "albert-ray export") -> int:
    args = build_parser(prog).parse_args(argv)

    def run() -> int:
        from .embedding_check import embedding_similarity
        from .onnx import check_target, export_onnx, load_exportable, max_abs_difference, prediction_agreement

        check_target(args.output, args.model_dir, args.opset, args.force)  # before the model loads
        exportable = load_exportable(args.model_dir, embedding=args.embedding)
        done = export_onnx(
            exportable, args.output, args.opset, args.force, quantize=args.quantize, fuse=args.fuse_attention
        )
        what = f"{exportable.architecture}'s encoder" if args.embedding else exportable.architecture
        print(
            f"wrote {done.path} ({what}, opset {done.opset}"
            + (f", int8: {done.quantized.matrices} matrices, {done.quantized.tables} tables" if done.quantized else "")
            + (f", {done.attention_fused} MultiHeadAttention" if done.attention_fused else "")
            + f"): {done.onnx_bytes / 1e6:.2f} MB, model.safetensors {done.weights_bytes / 1e6:.2f} MB, "
            f"ratio {done.ratio:.3f}, {done.seconds:.1f} s",
            flush=True,
        )
        if args.no_check:
            return 0
        if done.quantized and args.embedding:
            similarity = embedding_similarity(exportable, done.path)
            print(f"least cosine similarity of sentence vectors to PyTorch's (int8): {similarity:.5f}", flush=True)
            if similarity < SIMILARITY:
                print(f"{prog}: error: {done.path}'s sentence vectors are under {SIMILARITY} similar", file=sys.stderr)
                return 1
            return 0
        if done.quantized:
            agreement = prediction_agreement(exportable, done.path)
            print(f"predictions agreeing with PyTorch (onnxruntime CPU, int8): {agreement:.2%}", flush=True)
            if agreement < AGREEMENT:
                print(
                    f"{prog}: error: {done.path} agrees with PyTorch on {agreement:.2%} of predictions, under "
                    f"{AGREEMENT:.0%}",
                    file=sys.stderr,
                )
                return 1
            return 0
        difference = max_abs_difference(exportable, done.path)
        print(f"max abs difference vs PyTorch (onnxruntime CPU): {difference:.2e}", flush=True)
        if difference > TOLERANCE:
            print(f"{prog}: error: {done.path} differs from PyTorch by more than {TOLERANCE:g}", file=sys.stderr)
            return 1
        return 0

    return guarded(prog, run)


__all__ = ["AGREEMENT", "SIMILARITY", "TOLERANCE", "build_parser", "main"]
