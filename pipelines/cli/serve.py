"""`albert-ray serve MODEL_DIR`: a fine-tuned model (an export of any task family predict applies)
behind an HTTP endpoint on Ray Serve, until Ctrl-C (or SIGTERM) shuts it down; or several models on
one deployment, by name (`--model NAME=DIR` repeated, `--models DIR`: its sub-folders).

    albert-ray serve runs/x/finetune/best | --model NAME=DIR ... | --models DIR [--models-per-replica 3]
        [--host 127.0.0.1] [--port 8000] [--route /predict]
        [--replicas N | --min-replicas A --max-replicas B [--target-ongoing-requests T]]
        [--gpus-per-replica G] [--cpus-per-replica C] [--threads-per-replica T] [--max-batch-size 32]
        [--max-batch-tokens 8192]
        [--batch-wait-ms 10] [--max-queued-requests 256] [--request-timeout-s 60] [--max-seq-length L]
        [--backend onnx --onnx FILE | --onnx NAME=FILE ...] [--precision auto|fp32|bf16]
        [--exit-patience N | --exit-entropy H]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import signal
import time
from collections.abc import Callable, Sequence

from ..config.sections import PRECISIONS
from ..console import guarded, setup_logging
from ..errors import BadInput
from ..stages.ray_runtime import init_ray
from ..stages.serve import (
    ServeOptions,
    endpoint_app,
    replica_gpus,
    start_endpoint,
    stop_endpoint,
)
from ..stages.serve_ingress import auto_threads, host_across_nodes, resolved_ingress
from ..stages.serve_multiplex import multiplex_app
from ..stages.serve_options import INGRESSES
from .serve_models import named_models, onnx_files, read_models, serving_lines

DEFAULTS = ServeOptions()


def positive(kind: type[int] | type[float]) -> Callable[[str], float]:
    """An argparse type: a number above 0."""

    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be above 0")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add(
        "model_dir",
        metavar="MODEL_DIR",
        nargs="?",
        help="a fine-tuned export (finetune/best), local or s3://; or several models by --model/--models",
    )
    add(
        "--model",
        metavar="NAME=DIR",
        action="append",
        help="a model served at <route>/NAME, one of several on one deployment (repeat it)",
    )
    add(
        "--models",
        metavar="DIR",
        action="append",
        help="a folder of models: each sub-folder holding a config.json is served at <route>/<its name>",
    )
    add(
        "--models-per-replica",
        metavar="N",
        type=positive(int),
        help="with --model/--models: the most models a replica holds loaded, the least recently used evicted "
        f"beyond it (default: {DEFAULTS.models_per_replica})",
    )
    add(
        "--host",
        default=DEFAULTS.host,
        help="the address the endpoint listens on, on the Ray head node (0.0.0.0: every one) (default: %(default)s)",
    )
    add("--port", type=int, default=DEFAULTS.port, help="the HTTP port (default: %(default)s)")
    add(
        "--ingress",
        choices=INGRESSES,
        default=DEFAULTS.ingress,
        help="what takes the requests: haproxy (Serve's HAProxy, replicas answering HTTP themselves), proxy "
        "(Serve's Python HTTP proxy, which routes several models' requests to the replicas holding them), or auto: "
        "haproxy for one model where its binary is found and it can reach every replica (--host 0.0.0.0, or a "
        "cluster of one node that nothing adds nodes to) (default: %(default)s)",
    )
    add(
        "--route",
        default=DEFAULTS.route,
        help="the endpoint's path: POST predicts, GET describes the model (default: %(default)s)",
    )
    add("--replicas", metavar="N", type=positive(int), help=f"copies of the model (default: {DEFAULTS.replicas})")
    add(
        "--min-replicas",
        metavar="A",
        type=positive(int),
        help=f"with --max-replicas: the fewest copies Serve's autoscaler keeps (default: {DEFAULTS.min_replicas})",
    )
    add("--max-replicas", metavar="B", type=positive(int), help="the most copies Serve's autoscaler starts")
    add(
        "--target-ongoing-requests",
        metavar="T",
        type=positive(float),
        help="with --max-replicas: requests per replica the autoscaler aims at (default: --max-batch-size)",
    )
    add(
        "--upscale-delay-s",
        metavar="S",
        type=float,
        default=DEFAULTS.upscale_delay_s,
        help="how long the load stays above the target before a replica is added (default: %(default)s)",
    )
    add(
        "--downscale-delay-s",
        metavar="S",
        type=float,
        default=DEFAULTS.downscale_delay_s,
        help="how long the load stays below the target before a replica is removed (default: %(default)s)",
    )
    add(
        "--max-queued-requests",
        metavar="Q",
        type=positive(int),
        default=DEFAULTS.max_queued_requests,
        help="requests held (by each replica behind HAProxy, by the proxy behind Serve's proxy) while every replica "
        "is full; beyond them a 503 with Retry-After "
        "(default: %(default)s)",
    )
    add(
        "--request-timeout-s",
        metavar="S",
        type=positive(float),
        default=DEFAULTS.request_timeout_s,
        help="the longest a request may take, queueing included, before a 408; also how long stopping waits "
        "for the requests in flight (default: %(default)s)",
    )
    add("--gpus-per-replica", metavar="G", type=float, help="GPUs per replica; by default 1 where the cluster has GPUs")
    add(
        "--cpus-per-replica",
        metavar="C",
        type=positive(float),
        default=DEFAULTS.cpus_per_replica,
        help="CPUs each replica reserves in Ray (default: %(default)s)",
    )
    add(
        "--threads-per-replica",
        metavar="T",
        type=positive(int),
        help="threads each replica computes on (default: auto: a fixed number of CPU replicas on a cluster of one "
        "node that nothing grows share its cores, less one for Serve's Python proxy where it is the ingress; "
        "elsewhere the whole CPUs of --cpus-per-replica)",
    )
    add(
        "--max-batch-size",
        metavar="N",
        type=positive(int),
        default=DEFAULTS.max_batch_size,
        help="rows per forward pass (default: %(default)s)",
    )
    add(
        "--max-batch-tokens",
        metavar="N",
        type=positive(int),
        default=DEFAULTS.max_batch_tokens,
        help="padded tokens (rows x the longest) per forward pass (default: %(default)s)",
    )
    add(
        "--batch-wait-ms",
        metavar="MS",
        type=float,
        default=DEFAULTS.batch_wait_ms,
        help="how long a batch waits to fill (default: %(default)s)",
    )
    add(
        "--max-seq-length",
        metavar="L",
        type=positive(int),
        help="tokens per input (a text pair, a choice, a window); by default the length the model was fine-tuned "
        "at (its config.json's albert_ray.max_seq_length), else 512 or the model's positions where fewer",
    )
    add(
        "--backend",
        choices=["torch", "onnx"],
        default=DEFAULTS.backend,
        help="what runs the model: torch (MODEL_DIR's weights) or onnx (--onnx FILE in onnxruntime, on the "
        "replica's CPUs) (default: %(default)s)",
    )
    add(
        "--precision",
        choices=PRECISIONS,
        default=DEFAULTS.precision,
        help="what --backend torch computes in: auto (bf16 on a GPU that has it, fp32 on a CPU), fp32 or bf16 "
        "(default: %(default)s)",
    )
    add(
        "--onnx",
        metavar="FILE | NAME=FILE",
        action="append",
        help="--backend onnx: an ONNX export of MODEL_DIR (`albert-ray export onnx MODEL_DIR FILE [--quantize int8]`), "
        "local or s3://; with several models, NAME=FILE for each",
    )
    add(
        "--exit-patience",
        metavar="N",
        type=positive(int),
        help="early exit: a row stops once its prediction held N more depths",
    )
    add(
        "--exit-entropy",
        metavar="H",
        type=float,
        help="early exit: a row stops once its prediction's entropy is below H",
    )
    return parser


def check_replicas(args: argparse.Namespace) -> None:
    """A fixed --replicas, or the autoscaler's bounds (--max-replicas with what only it uses), not both."""
    scaling = [f"--{k.replace('_', '-')}" for k in ("min_replicas", "target_ongoing_requests") if getattr(args, k)]
    if args.replicas is not None and (args.max_replicas is not None or scaling):
        other = "--max-replicas" if args.max_replicas is not None else scaling[0]
        raise BadInput(f"--replicas {args.replicas}: a fixed number of replicas, not with {other} (autoscaling)")
    if args.max_replicas is None and scaling:
        raise BadInput(f"{scaling[0]}: autoscaling needs --max-replicas")
    if args.max_replicas is not None and (args.min_replicas or DEFAULTS.min_replicas) > args.max_replicas:
        raise BadInput(f"--min-replicas {args.min_replicas}: above --max-replicas {args.max_replicas}")
    for name in ("upscale_delay_s", "downscale_delay_s"):
        if getattr(args, name) < 0:
            raise BadInput(f"--{name.replace('_', '-')} {getattr(args, name):g}: must be 0 or more")


def check_models(args: argparse.Namespace) -> None:
    """One MODEL_DIR, or several models by name; what only several models use, only with them."""
    several = args.model is not None or args.models is not None
    if args.model_dir is None and not several:
        raise BadInput("MODEL_DIR: give the model to serve (or several: --model NAME=DIR, --models DIR)")
    if args.model_dir is not None and several:
        flag = "--model" if args.model is not None else "--models"
        raise BadInput(f"MODEL_DIR {args.model_dir}: one model, served alone; not with {flag} (several, by name)")
    if args.models_per_replica is not None and not several:
        raise BadInput(f"--models-per-replica {args.models_per_replica}: only with several models (--model/--models)")


def interrupt(signum, frame) -> None:
    """SIGTERM (a container stopping, `kill`) shuts down as Ctrl-C does."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, prog: str = "albert-ray serve") -> int:
    setup_logging()
    parser = build_parser(prog)

    def run() -> int:
        args = parser.parse_args(argv)
        if not 1 <= args.port <= 65535:  # 0 would listen on a port the printed URL does not name
            raise BadInput(f"--port {args.port}: must be 1 to 65535")
        if not args.route.startswith("/"):
            parser.error(f"--route {args.route}: must start with /")
        if args.gpus_per_replica is not None and args.gpus_per_replica < 0:
            parser.error(f"--gpus-per-replica {args.gpus_per_replica:g}: must be 0 or more")
        if args.batch_wait_ms < 0:
            parser.error(f"--batch-wait-ms {args.batch_wait_ms:g}: must be 0 or more")
        if args.onnx and args.backend != "onnx":
            raise BadInput("--backend onnx runs an ONNX file: give it as --onnx FILE (and --onnx only with it)")
        if args.backend == "onnx" and args.precision != "auto":
            raise BadInput(f"--precision {args.precision}: --backend onnx runs the export in its own precision")
        if args.backend == "onnx" and args.gpus_per_replica:
            raise BadInput(f"--gpus-per-replica {args.gpus_per_replica:g}: --backend onnx runs on CPU")
        check_replicas(args)
        check_models(args)
        options = ServeOptions(
            host=args.host,
            port=args.port,
            ingress=args.ingress,  # chosen once Ray is up
            route=args.route,
            replicas=args.replicas or DEFAULTS.replicas,
            min_replicas=args.min_replicas or DEFAULTS.min_replicas,
            max_replicas=args.max_replicas,
            target_ongoing_requests=args.target_ongoing_requests,
            upscale_delay_s=args.upscale_delay_s,
            downscale_delay_s=args.downscale_delay_s,
            max_queued_requests=args.max_queued_requests,
            request_timeout_s=args.request_timeout_s,
            gpus_per_replica=args.gpus_per_replica,
            cpus_per_replica=args.cpus_per_replica,
            threads_per_replica=args.threads_per_replica,  # auto: chosen once Ray is up
            max_batch_size=args.max_batch_size,
            max_batch_tokens=args.max_batch_tokens,
            batch_wait_ms=args.batch_wait_ms,
            max_seq_length=args.max_seq_length,
            backend=args.backend,
            precision=args.precision,
            exit_patience=args.exit_patience,
            exit_entropy=args.exit_entropy,
            models_per_replica=args.models_per_replica or DEFAULTS.models_per_replica,
        )
        resolved_ingress(args.ingress)  # an explicit haproxy without a binary is refused before anything is read
        if args.exit_entropy is not None and args.exit_entropy <= 0:
            parser.error(f"--exit-entropy {args.exit_entropy:g}: must be more than 0")
        several = args.model_dir is None
        folders = named_models(args.model or [], args.models or []) if several else {"": args.model_dir}
        onnx = onnx_files(args.onnx or [], folders, several) if args.backend == "onnx" else {}
        models = read_models(folders, onnx, options.max_seq_length, args.exit_patience, args.exit_entropy)
        if not several:
            model = models[""]
            options = dataclasses.replace(options, max_seq_length=model.max_seq_length)
            app_of = functools.partial(endpoint_app, args.model_dir, model)
        else:
            app_of = functools.partial(multiplex_app, folders, models)
        init_ray()
        beyond = host_across_nodes(options.host)
        options = dataclasses.replace(options, ingress=resolved_ingress(args.ingress, several, beyond))
        options = dataclasses.replace(options, threads_per_replica=auto_threads(options, replica_gpus(options)))
        previous = signal.signal(signal.SIGTERM, interrupt)
        try:
            url = start_endpoint(functools.partial(app_of, options), options)
        except BaseException as e:  # start_endpoint has shut down what it started
            signal.signal(signal.SIGTERM, previous)
            if not isinstance(e, KeyboardInterrupt):
                raise
            print("stopped before the endpoint came up", flush=True)
            return 130
        try:
            print(serving_lines(url, options, folders, models, onnx), flush=True)
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping: the replicas finish the requests they hold", flush=True)
        finally:
            signal.signal(signal.SIGTERM, previous)
            stop_endpoint()
        print("stopped", flush=True)
        return 0

    return guarded(prog, run)
