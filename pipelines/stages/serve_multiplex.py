"""Several models on one Ray Serve deployment (`albert-ray serve --model NAME=DIR ...`), with Serve's
model multiplexing: a replica loads a model on its first request and, beyond `models_per_replica`,
evicts the least recently used one (removing its files). `POST <route>/<name>` predicts with that
model (or `POST <route>` with Serve's `serve_multiplexed_model_id` header, which also lets the proxy
prefer a replica that has the model loaded), `POST <route>/<name>/embed` (or `<route>/embed` with the
header) answers its sentence vectors (serve_embed.py's request and answer), `GET <route>/<name>`
describes it, `GET <route>` lists the models and what this replica has loaded. A model without a
task head (an encoder) answers embeddings only. Requests are checked and answered as serve.py's
single-model endpoint answers them; rows of one model share forward passes."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
import torch
from ray import serve
from ray.serve import Application
from starlette.requests import Request
from starlette.responses import JSONResponse

from ..errors import one_line
from ..inference.embedding import Embedder
from ..inference.predictor import Predictor
from ..storage.models import materialize
from .serve import (
    HEALTH,
    BodyTooLarge,
    ServeOptions,
    deployment_options,
    description,
    error,
    load_predictor,
    onnx_in,
    predicted,
    read_body,
    route_parts,
)
from .serve_batching import Batcher
from .serve_embed import EMBED, NO_EMBEDDING, NO_HEAD, embedded, load_embedder
from .served_model import ServedModel

log = logging.getLogger(__name__)

MODEL_HEADER = "serve_multiplexed_model_id"
"""Serve's header naming the model of a request (its proxy also reads `serve-multiplexed-model-id`)."""


@dataclass(frozen=True)
class HeldModel:
    """A model of the deployment as its replicas get it: its folder's name for GET, and its files
    (storage.models.read_model_files) in Ray's object store, fetched by a replica when it loads it."""

    folder: str
    files: ray.ObjectRef
    predicts: bool
    """Whether it predicts, and whether it embeds (served_model.ServedModel's, decided on the driver)."""
    embeds: bool


class LoadedModel:
    """A model a replica has loaded, in a temporary folder of its own. Serve's multiplexer calls
    `__del__` when it evicts it: the folder goes, and the replica no longer counts it as loaded."""

    def __init__(
        self,
        name: str,
        predictor: Predictor | None,
        embedder: Embedder | None,
        work: str,
        info: dict[str, Any],
        release: Callable[[LoadedModel], None],
    ):
        self.name, self.predictor, self.embedder, self.work = name, predictor, embedder, work
        self.info, self.release = info, release
        self.batches = self.rows = 0
        self.unloaded = False

    def __del__(self) -> None:
        # called twice: by the multiplexer on eviction, then by the garbage collector
        if not self.unloaded:
            self.unloaded = True
            shutil.rmtree(self.work, ignore_errors=True)
            self.release(self)


@serve.deployment(max_constructor_retry_count=3)
class MultiplexEndpoint:
    """A replica: the models by name, each loaded on first use. Routing (`__call__`) in one place."""

    def __init__(self, models: dict[str, HeldModel], options: ServeOptions):
        torch.set_num_threads(options.threads)
        self.models, self.options = models, options
        self.work = tempfile.mkdtemp(prefix="albert-serve-")
        self.loaded: dict[str, LoadedModel] = {}
        self.loads: Counter[str] = Counter()
        self.ongoing = 0
        self.predict_rows = Batcher(self.run_rows, options.max_batch_size, options.batch_wait_ms / 1000)
        self.embed_rows = Batcher(self.embed_batch, options.max_batch_size, options.batch_wait_ms / 1000)

        async def load_model(name: str) -> LoadedModel:
            return await self.load(name)

        # decorated here, not on the class, as the cap is the app's (--models-per-replica); Serve
        # looks for a multiplexed function among the replica's attributes too
        self.model_named = serve.multiplexed(max_num_models_per_replica=options.models_per_replica)(load_model)

    def __del__(self) -> None:  # Serve calls it when it stops the replica
        shutil.rmtree(self.work, ignore_errors=True)

    async def load(self, name: str) -> LoadedModel:
        held = self.models[name]
        files = await held.files
        work = tempfile.mkdtemp(prefix=f"{name}-", dir=self.work)
        try:
            predictor, embedder = await asyncio.to_thread(self.read, materialize(files, work), held)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        self.loads[name] += 1
        info = description(held.folder, predictor, self.options, embedder)
        self.loaded[name] = LoadedModel(name, predictor, embedder, work, info, self.release)
        return self.loaded[name]

    def read(self, local: str, held: HeldModel) -> tuple[Predictor | None, Embedder | None]:
        """The model `held`, its files in the local folder `local`: its Predictor (where it predicts)
        and Embedder (where it embeds: its encoder, the predictor's own where there is one), as
        serve.py's endpoint loads them."""
        o, onnx = self.options, onnx_in(local, self.options)
        predictor = load_predictor(local, o) if held.predicts else None
        if not held.embeds:
            return predictor, None
        return predictor, load_embedder(local, predictor, onnx, o.max_seq_length, o.max_batch_size, o.max_batch_tokens)

    def release(self, model: LoadedModel) -> None:
        if self.loaded.get(model.name) is model:  # not a later load of the same name
            del self.loaded[model.name]

    async def run_rows(
        self, items: list[tuple[LoadedModel, dict[str, Any]]]
    ) -> list[tuple[dict[str, Any], str | None]]:
        """A batch's outputs (`predict_rows` batches the rows of concurrent requests, whatever their
        model): each row's output with its model, and the reason where only encoding found it unusable."""

        def predicted(model: LoadedModel, rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str | None]]:
            model.batches, model.rows = model.batches + 1, model.rows + len(rows)
            outputs, rejected = model.predictor.run(rows)
            return [(out, rejected.get(j)) for j, out in enumerate(outputs)]

        return await per_model(items, predicted)

    async def embed_batch(self, items: list[tuple[LoadedModel, dict[str, Any]]]) -> list[Any]:
        """A batch's rows' vectors by every pooling (embedding.pooled), with their models."""
        return await per_model(items, lambda model, rows: list(model.embedder.vectors(rows)))

    async def __call__(self, request: Request) -> JSONResponse:
        route, parts = request.scope.get("root_path", ""), route_parts(request)
        named = serve.get_multiplexed_model_id()
        if parts == [HEALTH.strip("/")]:
            if request.method != "GET":
                return error(405, f"method: {request.method} is not served on {HEALTH} (GET)")
            return JSONResponse({"status": "ok", "ongoing": self.ongoing})
        embed = bool(parts) and parts[-1] == EMBED.strip("/")  # "embed" is no model's name (serve_models.RESERVED)
        parts = parts[:-1] if embed else parts
        if len(parts) > 1:
            return error(404, f"path: {request.url.path} is not served ({route}/<model name>[{EMBED}])")
        if embed and request.method != "POST":
            return error(405, f"method: {request.method} is not served on {EMBED} (POST)")
        if parts and named and parts[0] != named:
            return error(400, f"model: the path names {parts[0]!r}, the {MODEL_HEADER} header {named!r}")
        name = parts[0] if parts else named
        if request.method not in ("GET", "POST"):
            return error(405, f"method: {request.method} is not served (POST predicts, GET describes)")
        if not name:
            if request.method == "GET":
                return JSONResponse(self.listing())
            return error(400, f"model: name one, as {route}/<name> or the {MODEL_HEADER} header ({self.names()})")
        if name not in self.models:
            return error(404, f"model: {name!r} is not served here ({self.names()})")
        if request.method == "GET":
            model = await self.model_named(name)
            return JSONResponse({**model.info, "name": name, "served": {"batches": model.batches, "rows": model.rows}})
        self.ongoing += 1
        try:
            return await (self.embed(name, request) if embed else self.predict(name, request))
        finally:
            self.ongoing -= 1

    def names(self) -> str:
        return f"models: {', '.join(self.models)}"

    def listing(self) -> dict[str, Any]:
        """The models, and this replica's: those loaded now, and how often each was loaded."""
        return {
            "models": {name: held.folder for name, held in self.models.items()},
            "models_per_replica": self.options.models_per_replica,
            "loaded": sorted(self.loaded),
            "loads": dict(self.loads),
        }

    async def body_and_model(self, name: str, request: Request) -> tuple[bytes, LoadedModel] | JSONResponse:
        """The request's body and its model, loaded; or the error answer."""
        try:
            body = await read_body(request)
        except BodyTooLarge as e:
            return error(413, one_line(e))
        try:
            return body, await self.model_named(name)
        except Exception as e:  # its folder was checked before Serve started: a fault of ours
            log.exception("loading %s failed", name)
            return error(500, f"loading model {name!r} failed: {one_line(e)}")

    async def embed(self, name: str, request: Request) -> JSONResponse:
        got = await self.body_and_model(name, request)
        if isinstance(got, JSONResponse):
            return got
        body, model = got
        if model.embedder is None:
            return error(404, f"model {name!r}: {NO_EMBEDDING}")
        return await embedded(body, lambda row: self.embed_rows((model, row)))

    async def predict(self, name: str, request: Request) -> JSONResponse:
        got = await self.body_and_model(name, request)
        if isinstance(got, JSONResponse):
            return got
        body, model = got
        if model.predictor is None:
            return error(404, f"model {name!r}: {self.models[name].folder} {NO_HEAD}")
        return await predicted(body, model.predictor, lambda row: self.predict_rows((model, row)))


async def per_model(items: list[tuple[LoadedModel, dict[str, Any]]], run: Callable[[LoadedModel, list], list]) -> list:
    """`run(model, rows)` over a batch's (model, row) items grouped by their model, each model's rows
    in one call (their forward passes shared), off the replica's event loop (so requests keep being
    checked and queued while a model runs); the results in the items' order."""
    by_model: dict[LoadedModel, list[int]] = {}
    for i, (model, _) in enumerate(items):
        by_model.setdefault(model, []).append(i)
    results: list[Any] = [None] * len(items)
    for model, indices in by_model.items():
        out = await asyncio.to_thread(run, model, [items[i][1] for i in indices])
        for j, i in enumerate(indices):
            results[i] = out[j]
    return results


def multiplex_app(
    folders: dict[str, str], models: dict[str, ServedModel], options: ServeOptions, gpus: float
) -> Application:
    """The models (by name: their folder, and served_model.read_model's reading of it) on one
    deployment, its replicas reserving `gpus` each: what start_endpoint runs."""
    deployment = MultiplexEndpoint.options(**deployment_options(options, gpus))
    # one object ref per model: a replica fetches a model's files only when it loads it
    held = {
        name: HeldModel(folder, ray.put(models[name].files), models[name].predicts, models[name].embeds)
        for name, folder in folders.items()
    }
    return deployment.bind(held, options)


__all__ = ["MODEL_HEADER", "HeldModel", "LoadedModel", "MultiplexEndpoint", "multiplex_app"]
