"""`albert-ray serve`: a fine-tuned model of any task family behind an HTTP endpoint on Ray Serve. Each
replica holds a pipelines/inference Predictor, which applies the model as its family says. A request
(a row of the family's fields, or a list of them: pipelines/inference/request.py) is checked before
it reaches the model (a body over the limit is a 413 before it is read whole, a malformed one a 400
naming the field); its rows then join the replica's batching queue (serve_batching.py: a batch is
taken when the model is free), so rows from concurrent callers, and a list request's rows, share
forward passes (bounded by rows and by padded tokens); each is answered with the family's output.
Under load Serve scales the replicas between bounds, a request beyond the queue bound is a
503 with Retry-After, one over the timeout a 408, and stopping drains the requests in flight.
POST {route}/embed answers sentence vectors (serve_embed.py), alone for an encoder. Several models
on one deployment, by name: serve_multiplex.py, on these parts."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from typing import Any

import ray
import torch
from ray import serve
from ray.serve import Application
from ray.serve.config import AutoscalingConfig, BackpressureConfig
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import BadInput, UserError, one_line
from ..inference.embedding import EMBEDDING_ROWS, Embedder
from ..inference.onnx_runner import ONNX_FILE
from ..inference.predictor import Predictor
from ..inference.request import MAX_INPUTS, parse_request
from ..storage.models import materialize
from .ray_runtime import gpu_capacity
from .serve_batching import Batcher
from .serve_embed import EMBED, NO_HEAD, EmbedRoute, each_row, error, load_embedder
from .serve_ingress import (
    check_placement,
    check_port,
    controller_env,
    haproxy_folder,
    remove_haproxy_folders,
    replica_env,
)
from .serve_options import ServeOptions
from .served_model import ServedModel

log = logging.getLogger(__name__)


class OwnServeNote(logging.Filter):
    """Drops Serve's 'Connecting to existing Serve app ... New http_options/controller_options will
    not be applied' INFO line: serve.run logs it on connecting to the Serve that start_endpoint has
    just started with the command's HTTP options (Serve applies them only at its first start,
    ray-project/ray#17577), so it is about our own Serve, right after it started, and nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Connecting to existing Serve app")


OWN_SERVE_NOTE = OwnServeNote()

APP = "albert-ray"
"""The Serve application's name."""
MAX_BODY_BYTES = 1 << 20
"""The largest request body read; a longer one is refused from its Content-Length, or once a
streamed (chunked) one passes it; the replica reads none of the rest."""
RETRY_AFTER_S = 1
"""The Retry-After (seconds) of a 503 for a full queue: about a batch's time, after which a slot is likely free."""
HEALTH = "/health"
"""The health route, under the endpoint's route: GET answers 200 while the replica serves."""


def route_parts(request: Request) -> list[str]:
    """The request's path under the endpoint's route (Serve's root_path), by part."""
    return [p for p in request.url.path[len(request.scope.get("root_path", "")) :].split("/") if p]


class BodyTooLarge(BadInput):
    """A request body over MAX_BODY_BYTES (HTTP 413)."""


async def read_body(request: Request) -> bytes:
    """The request's body, read no further than MAX_BODY_BYTES: BodyTooLarge when its Content-Length
    says more (nothing read), or once a streamed body passes it."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise BodyTooLarge(f"body: {declared} bytes (its Content-Length), over the limit of {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BodyTooLarge(f"body: over the limit of {MAX_BODY_BYTES} bytes")
    return bytes(body)


def answered(
    results: list[tuple[dict[str, Any], str | None]], listed: bool, labels: list[str] | None
) -> tuple[int, Any]:
    """(status, body) of a request's predicted rows (each its output and the reason where only
    encoding found it unusable): 200 with the outputs and the model's labels, one object or a list
    as asked; 400 naming the first unusable row."""
    for i, (_, reason) in enumerate(results):
        if reason is not None:
            return 400, {"error": f"{f'inputs[{i}]' if listed else 'body'}: {reason}"}
    answers = [{**out, "labels": labels} for out, _ in results]
    return 200, answers if listed else answers[0]


def onnx_in(local: str, options: ServeOptions) -> str | None:
    """The ONNX export in a replica's copy of a model folder (served_model.read_model carried it
    there) for the onnx backend; None for torch."""
    return os.path.join(local, ONNX_FILE) if options.backend == "onnx" else None


def load_predictor(local: str, options: ServeOptions) -> Predictor:
    """The model of a local folder (storage.models.materialize), applied as the options say."""
    return Predictor.load(
        local,
        options.max_seq_length,
        options.max_batch_size,
        onnx=onnx_in(local, options),
        exit_patience=options.exit_patience,
        exit_entropy=options.exit_entropy,
        max_batch_tokens=options.max_batch_tokens,
        precision=options.precision,
    )


def description(
    model: str, predictor: Predictor | None, options: ServeOptions, embedder: Embedder | None = None
) -> dict[str, Any]:
    """What GET answers of a model (`model`: its folder) served with `options`: its family's fields
    and outputs where it has a task head (`predictor`), its vectors' size where it embeds."""
    inference = predictor.inference if predictor is not None else EMBEDDING_ROWS
    return {
        "model": model,
        "kind": predictor.family.name if predictor is not None else None,
        "fields": list(inference.fields),
        "required": list(inference.required),
        "outputs": list(predictor.output) if predictor is not None else [],
        "labels": predictor.use.label_names if predictor is not None else None,
        "max_seq_length": (predictor or embedder).use.max_seq_length,
        "embedding_dimension": embedder.dimension if embedder is not None else None,
        "backend": options.backend,
        "ingress": options.ingress,
        "threads": torch.get_num_threads(),  # what the replica computes on (ServeOptions.threads)
        "max_batch_size": options.max_batch_size,
        "max_batch_tokens": options.max_batch_tokens,
        "max_inputs": MAX_INPUTS,
    }


@serve.deployment(max_constructor_retry_count=3)
class PredictEndpoint(EmbedRoute):
    """A replica: the model in a Predictor and its encoder in an Embedder, each loaded only where the
    model `predicts` or `embeds` (served_model.ServedModel's, decided once on the driver). POST
    predicts, POST {route}/embed embeds, GET describes the model."""

    def __init__(self, model: str, options: ServeOptions, files: ray.ObjectRef, predicts: bool, embeds: bool):
        torch.set_num_threads(options.threads)
        self.work = tempfile.mkdtemp(prefix="albert-serve-")
        local = materialize(ray.get(files), self.work)
        self.predictor = load_predictor(local, options) if predicts else None
        self.embedder = None
        if embeds:
            batching = (options.max_seq_length, options.max_batch_size, options.max_batch_tokens)
            self.embedder = load_embedder(local, self.predictor, onnx_in(local, options), *batching)
        self.predict_rows = Batcher(self.run_rows, options.max_batch_size, options.batch_wait_ms / 1000)
        self.embed_rows = Batcher(self.embed_batch, options.max_batch_size, options.batch_wait_ms / 1000)
        self.info = description(model, self.predictor, options, self.embedder)
        self.ongoing = 0

    def __del__(self) -> None:  # Serve calls it when it stops the replica
        shutil.rmtree(self.work, ignore_errors=True)

    async def run_rows(self, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
        """A batch's outputs (`predict_rows` batches the rows of concurrent requests): each row's
        output, and the reason where only encoding found it unusable."""
        # off the replica's event loop, so requests keep being checked and queued while the model runs
        outputs, rejected = await asyncio.to_thread(self.predictor.run, rows)
        return [(out, rejected.get(i)) for i, out in enumerate(outputs)]

    async def __call__(self, request: Request) -> JSONResponse:
        parts = route_parts(request)
        if parts not in ([], [HEALTH.strip("/")], [EMBED.strip("/")]):  # a typo of /embed is no prediction
            route = request.scope.get("root_path", "")
            return error(404, f"path: {request.url.path} is not served ({route}, {route}{EMBED}, {route}{HEALTH})")
        if parts == [HEALTH.strip("/")]:
            if request.method != "GET":
                return error(405, f"method: {request.method} is not served on {HEALTH} (GET)")
            return JSONResponse({"status": "ok", "ongoing": self.ongoing})
        embed = parts == [EMBED.strip("/")]
        if request.method == "GET" and not embed:
            return JSONResponse({**self.info, "served": self.predict_rows.served()})
        if request.method != "POST":
            served = f"on {EMBED} (POST)" if embed else "(POST predicts, GET describes the model)"
            return error(405, f"method: {request.method} is not served {served}")
        self.ongoing += 1
        try:
            return await self.predict(request, embed)
        finally:
            self.ongoing -= 1

    async def predict(self, request: Request, embed: bool = False) -> JSONResponse:
        if self.predictor is None and not embed:
            return error(404, f"{self.info['model']} {NO_HEAD}")
        try:
            body = await read_body(request)
        except BodyTooLarge as e:
            return error(413, one_line(e))
        return await (self.embed(body) if embed else predicted(body, self.predictor, self.predict_rows))


async def predicted(
    body: bytes, predictor: Predictor, predict_row: Callable[[dict[str, Any]], Awaitable[tuple[dict, str | None]]]
) -> JSONResponse:
    """The answer to a prediction request's `body` for `predictor`'s family, each row run through
    `predict_row` (a replica's batching queue): 400 for a malformed request or an unusable row, 500
    where the model failed."""
    try:
        rows, listed = parse_request(body, predictor.inference)
    except BadInput as e:
        return error(400, one_line(e))
    outputs = await each_row(rows, predict_row, "prediction")
    if isinstance(outputs, JSONResponse):
        return outputs
    status, answer = answered(outputs, listed, predictor.use.label_names)
    return JSONResponse(answer, status_code=status)


def replica_gpus(options: ServeOptions) -> float:
    """--gpus-per-replica, or 1 where the cluster has GPUs (0 for the onnx backend, which runs on
    CPU); refused where it can never have any."""
    if options.backend == "onnx":
        return options.gpus_per_replica or 0.0  # the command refuses more before Ray starts
    now, most = gpu_capacity()
    gpus = options.gpus_per_replica if options.gpus_per_replica is not None else float(now > 0)
    if gpus > 0 and most == 0:
        raise BadInput(f"--gpus-per-replica {gpus:g}: the Ray cluster has no GPUs")
    return gpus


def replica_count(options: ServeOptions) -> dict[str, Any]:
    """Serve's options for the number of replicas: a fixed count, or its autoscaler between bounds."""
    if options.max_replicas is None:
        return {"num_replicas": options.replicas}
    target = options.target_ongoing_requests or float(options.max_batch_size)
    autoscaling = AutoscalingConfig(
        min_replicas=options.min_replicas,
        max_replicas=options.max_replicas,
        target_ongoing_requests=target,
        upscale_delay_s=options.upscale_delay_s,
        downscale_delay_s=options.downscale_delay_s,
    )
    return {"autoscaling_config": autoscaling}


def deployment_options(options: ServeOptions, gpus: float) -> dict[str, Any]:
    """Serve's options for an endpoint's deployment, its replicas reserving `gpus` each."""
    return {
        **replica_count(options),
        # a batch can fill while the one before it runs
        "max_ongoing_requests": 2 * options.max_batch_size,
        # Serve's own bound, at each replica behind HAProxy, at the proxy behind Serve's proxy: a full queue
        # is its 503 with Retry-After before the model sees the request
        "max_queued_requests": options.max_queued_requests,
        "backpressure_config": BackpressureConfig(status_code=503, retry_after_s=RETRY_AFTER_S),
        # a replica being stopped answers what it holds, for as long as a request may take
        "graceful_shutdown_timeout_s": options.request_timeout_s,
        "ray_actor_options": {
            "num_cpus": options.cpus_per_replica,
            "num_gpus": gpus,
            # the replicas read the ingress where they import Serve, as the controller does
            **({"runtime_env": {"env_vars": env}} if (env := replica_env(options)) else {}),
        },
    }


def endpoint_app(model: str, served: ServedModel, options: ServeOptions, gpus: float) -> Application:
    """The endpoint of the model folder `model` (`served`: served_model.read_model's reading of it)
    as a Serve application, its replicas reserving `gpus` each: what start_endpoint runs; apps of
    several models can share one Serve under names and routes of their own."""
    deployment = PredictEndpoint.options(**deployment_options(options, gpus))
    # the weights go through the object store: bound directly, they would sit in Serve's controller state
    return deployment.bind(model, options, ray.put(served.files), served.predicts, served.embeds)


def start_endpoint(app_of: Callable[[float], Application], options: ServeOptions) -> str:
    """Start Serve's ingress on the head node (serve_options.INGRESSES) and behind it the app
    `app_of(gpus per replica)` makes (endpoint_app's, serve_multiplex.multiplex_app's); returns the
    endpoint's URL. Serve must not be running on the cluster already: what this starts,
    `stop_endpoint` shuts down whole."""
    running = serve.status()
    if running.proxies or running.applications:
        raise UserError(
            f"Ray Serve already runs on this cluster (applications: {', '.join(running.applications) or 'none'}); "
            "albert-ray serve starts and stops a Serve of its own: stop that one (`serve shutdown`) or use another "
            "cluster"
        )
    gpus = replica_gpus(options)
    check_placement(options, gpus)
    check_port(options)
    env = controller_env(options)
    if "RAY_SERVE_ENABLE_HA_PROXY" in env:
        env.update(haproxy_folder())
    try:
        serve.start(
            proxy_location="HeadOnly",
            http_options={"host": options.host, "port": options.port, "request_timeout_s": options.request_timeout_s},
            # read where the controller imports Serve: only the controller's own environment sets it
            controller_options={"runtime_env": {"env_vars": env}},
        )
        logging.getLogger("ray.serve").addFilter(OWN_SERVE_NOTE)
        serve.run(app_of(gpus), name=APP, route_prefix=options.route)
    except BaseException as e:
        serve.shutdown()
        remove_haproxy_folders(keep=not isinstance(e, KeyboardInterrupt))  # a failure's HAProxy logs kept
        raise
    if "RAY_SERVE_HAPROXY_STATS_PORT" in env:
        log.info(
            "HAProxy in front of the replicas: its stats page at port %s (/stats) and its Prometheus metrics at "
            "port %s (/metrics) of the head node, on every interface",
            env["RAY_SERVE_HAPROXY_STATS_PORT"],
            env["RAY_SERVE_HAPROXY_METRICS_PORT"],
        )
    host = f"[{options.host}]" if ":" in options.host else options.host
    return f"http://{host}:{options.port}{options.route}"


def stop_endpoint() -> None:
    """Delete the app (its replicas finish the requests they hold) and shut Serve down."""
    serve.delete(APP)
    serve.shutdown()
    remove_haproxy_folders()


__all__ = [
    "APP",
    "BodyTooLarge",
    "HEALTH",
    "MAX_BODY_BYTES",
    "RETRY_AFTER_S",
    "PredictEndpoint",
    "ServeOptions",
    "answered",
    "deployment_options",
    "description",
    "endpoint_app",
    "error",
    "load_predictor",
    "onnx_in",
    "predicted",
    "read_body",
    "start_endpoint",
    "stop_endpoint",
]
