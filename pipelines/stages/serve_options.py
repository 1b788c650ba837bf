"""`albert-ray serve`'s options (ServeOptions): where the endpoint listens, its replicas, how it
batches and how it holds under load; the deployment (serve.py) and the command (cli/serve.py) read them."""

from __future__ import annotations

from dataclasses import dataclass

INGRESSES = ("auto", "haproxy", "proxy")
"""What takes the HTTP requests on the head node: haproxy (Serve's HAProxy in front of replicas
that answer HTTP themselves, on ports of their own: no Python proxy between, ~3x the requests/s of
proxy on 2 vCPUs, docs/BENCHMARKS.md), proxy (Serve's Python HTTP proxy, which hands each request
to a replica over Ray), or auto: haproxy for one model where an HAProxy binary is found, else proxy
(several models: Serve's proxy sends a request to a replica that holds its model; HAProxy does not
read the model's name) and where a --host other than every interface on a cluster of several nodes
(or one an autoscaler may grow) would put replicas out of HAProxy's reach (serve_ingress.resolved_ingress)."""


@dataclass(frozen=True)
class ServeOptions:
    """Where the endpoint listens, its replicas and their resources, how it batches, and how it
    holds under load."""

    host: str = "127.0.0.1"
    """The address the ingress (HAProxy or Serve's HTTP proxy) listens on, on the Ray head node
    (0.0.0.0: every interface); with HAProxy the replicas answer it at this address too."""
    port: int = 8000
    """The HTTP port (HAProxy's or the proxy's)."""
    ingress: str = "auto"
    """What takes the requests: one of INGRESSES."""
    route: str = "/predict"
    """The endpoint's path: POST predicts, GET describes the model (several models: each at route/<name>)."""
    replicas: int = 1
    """Copies of the model, a fixed number; Serve spreads requests over them (without max_replicas)."""
    min_replicas: int = 1
    """With max_replicas: the fewest copies Serve's autoscaler keeps."""
    max_replicas: int | None = None
    """The most copies Serve's autoscaler starts; None: a fixed `replicas`."""
    target_ongoing_requests: float | None = None
    """Requests per replica the autoscaler aims at; by default max_batch_size (a full batch each)."""
    upscale_delay_s: float = 10.0
    """How long the load must stay above the target before the autoscaler adds a replica."""
    downscale_delay_s: float = 60.0
    """How long the load must stay below the target before the autoscaler removes a replica."""
    max_queued_requests: int = 256
    """Requests held while every replica is full (each takes 2 x max_batch_size at a time): by each
    replica behind HAProxy, by the proxy for the deployment behind Serve's proxy; beyond it a
    request is answered 503 with Retry-After."""
    request_timeout_s: float = 60.0
    """The longest a request may take, queueing included, before a 408 (at the replica behind
    HAProxy, at the proxy behind Serve's proxy); also how long stopping waits for the requests in flight."""
    gpus_per_replica: float | None = None
    """GPUs each replica reserves; by default 1 where the cluster has GPUs, else 0."""
    cpus_per_replica: float = 1.0
    """CPUs each replica reserves in Ray (where Ray places it, and what other work may not take)."""
    threads_per_replica: int | None = None
    """torch's (and onnxruntime's) threads in each replica; None: cpus_per_replica's whole CPUs. The
    command gives a number where it picks one (serve_ingress.auto_threads)."""
    max_batch_size: int = 32
    """The most rows in one forward pass, from any number of requests."""
    batch_wait_ms: float = 10.0
    """How long a batch waits to fill before it runs anyway."""
    max_batch_tokens: int = 8192
    """The most padded tokens (rows x the longest) in one forward pass: rows sorted by length run in
    passes under both bounds, so one long text does not pad many short ones to its length."""
    max_seq_length: int | None = None
    """Tokens per input (a text pair, a choice, a window); by default the length the model was
    fine-tuned at (its config.json's record), else 512 capped by its position embeddings."""
    backend: str = "torch"
    """What runs the model: torch (the folder's weights) or onnx (an ONNX export of it, the
    ServedModel's, in onnxruntime on the replica's CPUs)."""
    precision: str = "auto"
    """What --backend torch computes in: auto (bf16 on a GPU that has it, fp32 on a CPU), fp32 or bf16."""
    exit_patience: int | None = None
    """Early exit: a row stops once its prediction has held for this many more depths (PABEE)."""
    exit_entropy: float | None = None
    """Early exit: a row stops once its prediction's entropy (nats) falls below this."""
    models_per_replica: int = 3
    """Several models on one deployment (serve_multiplex.py): the most each replica holds loaded,
    the least recently used evicted beyond it (Serve's max_num_models_per_replica)."""

    @property
    def threads(self) -> int:
        """The threads a replica computes on: threads_per_replica, else its reserved whole CPUs (at least 1)."""
        return self.threads_per_replica or max(1, int(self.cpus_per_replica))


__all__ = ["INGRESSES", "ServeOptions"]
