"""serve's embedding route, `POST {route}/embed` (issue #46): a row (`{"text": ..., "text_pair": ...}`)
or `{"inputs": [...]}` of them, with an optional `pooling` (mean, cls) and `normalize` (a boolean)
beside, answered `{"embedding": [...]}` for a row and a list of them for a list. The rows join a
batching queue of their own (serve_batching.py), as predictions do theirs; each batch runs the encoder once and
every request reads the pooling it asked for (pipelines/inference/embedding.py). A replica embeds
with its torch model's encoder (a fine-tuned head's, shared with the predictions, or a pretraining
export's) or with an ONNX export of the encoder alone (`export onnx --embedding`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
from starlette.responses import JSONResponse

from ..errors import BadInput, one_line
from ..inference.embedding import EMBEDDING, EMBEDDING_ROWS, Embedder, sentence_vector
from ..inference.predictor import Predictor
from ..inference.request import parse_embed_request
from .serve_batching import Batcher

log = logging.getLogger(__name__)

EMBED = "/embed"
"""The embedding route, under the endpoint's route."""
NO_HEAD = f"has no task head served (an encoder, or an ONNX export of its encoder): it answers POST {EMBED}"
"""Why a folder without a task head answers no POST {route} (after the folder's name)."""
NO_EMBEDDING = (
    "this ONNX export has no last_hidden_state; serve an encoder export "
    "(`albert-ray export onnx MODEL_DIR FILE --embedding`) for embeddings"
)
"""Why the onnx backend on a head's export answers no POST {route}/embed."""


def load_embedder(
    model_dir: str,
    predictor: Predictor | None,
    onnx: str | None,
    max_seq_length: int | None,
    batch_size: int,
    tokens: int,
) -> Embedder:
    """The replica's Embedder: the predictor's own encoder where it holds a torch model (the weights
    once in memory), else the folder's, or the ONNX encoder export."""
    encoder = predictor.model.albert if predictor is not None and onnx is None else None
    return Embedder.load(model_dir, max_seq_length, batch_size, onnx=onnx, max_batch_tokens=tokens, encoder=encoder)


class EmbedRoute:
    """What a replica adds for POST {route}/embed: `embed(body)`, the body read within its limit. The
    deployment sets `embedder` (None where its model has no encoder output: a head's ONNX export)."""

    embedder: Embedder | None
    embed_rows: Batcher[dict[str, Any], np.ndarray]
    """Rows of concurrent requests batched over `embed_batch` (set by the deployment)."""

    async def embed_batch(self, rows: list[dict[str, Any]]) -> list[np.ndarray]:
        """A batch's rows' vectors by every pooling (embedding.pooled)."""
        assert self.embedder is not None
        return list(await asyncio.to_thread(self.embedder.vectors, rows))

    async def embed(self, body: bytes) -> JSONResponse:
        if self.embedder is None:
            return error(404, f"{EMBED}: {NO_EMBEDDING}")
        return await embedded(body, self.embed_rows)


async def embedded(body: bytes, embed_row: Callable[[dict[str, Any]], Awaitable[np.ndarray]]) -> JSONResponse:
    """The answer to an embedding request's `body`, each row's vectors by every pooling from
    `embed_row` (a replica's batching queue): 400 for a malformed request, 500 where embedding failed."""
    try:
        rows, listed, pooling, normalize = parse_embed_request(body, EMBEDDING_ROWS)
    except BadInput as e:
        return error(400, one_line(e))
    vectors = await each_row(rows, embed_row, "embedding")
    if isinstance(vectors, JSONResponse):
        return vectors
    answers = [{EMBEDDING: sentence_vector(v, pooling, normalize)} for v in vectors]
    return JSONResponse(answers if listed else answers[0])


async def each_row(rows: list[dict[str, Any]], run_row: Callable[[dict[str, Any]], Awaitable[Any]], what: str) -> Any:
    """`run_row` over a request's rows at once (each joins the replica's batching queue): their
    results in order, or where it failed a 500 naming `what`, a fault of ours and not the request's
    (logged; the replica serves on)."""
    try:
        return await asyncio.gather(*(run_row(row) for row in rows))
    except Exception as e:
        log.exception(f"{what} failed")
        return error(500, f"{what} failed: {one_line(e)}")


def error(status: int, message: str) -> JSONResponse:
    """An error answer: {"error": message} with `status` (every route of serve's)."""
    return JSONResponse({"error": message}, status_code=status)


__all__ = [
    "EMBED",
    "NO_EMBEDDING",
    "NO_HEAD",
    "EmbedRoute",
    "each_row",
    "embedded",
    "load_embedder",
]
