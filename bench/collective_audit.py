"""A collective audit: the real pretraining loop on ranks that share one device, as threads of this
process, through torch's threaded process group checking that every tensor handed to a collective is
on the loop's device (NCCL rejects host tensors; nobody here has two GPUs to find one that way).
`python bench/collective_audit.py --device cuda --world 2 --out DIR` writes DIR/collective_audit.json.

The plan stops at a checkpoint halfway and resumes (DCP save and load), validates, checks training
health and exports (a full state dict gathered); bf16 (FSDP2 mixed precision) on CUDA, fp32 on CPU;
the same on one rank gives the reference weights. Exit status 1 on a violation or weights too far."""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import inspect
import json
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from safetensors.torch import load_file
from torch.distributed.tensor._sharding_prop import ShardingPropagator
from torch.testing._internal.distributed import multi_threaded_pg as threaded
from torch.utils._pytree import tree_leaves

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from synthetic_rows import static_rows  # noqa: E402  (bench/ beside this file: sys.path[0] for a script)

from albert_model import AlbertConfig  # noqa: E402
from pipelines.config import TrainSection  # noqa: E402
from pipelines.prep.process import example_schema  # noqa: E402
from pipelines.train import loop  # noqa: E402
from pipelines.train.input import SliceReader, ordered_batches  # noqa: E402
from pipelines.train.loader import TrainSplit  # noqa: E402
from pipelines.train.plan import PretrainPlan  # noqa: E402

# Registered under torch's own name for it: DeviceMesh then tells the threads' meshes apart, as in
# torch's threaded tests (a mesh is otherwise equal to, and cached as, another thread's).
BACKEND = "threaded"
# The threaded group's collective methods (both names where torch renamed one) and their op.
FAMILIES = {method: op for op, methods in [
    ("all_reduce", "allreduce allreduce_coalesced"),
    ("all_gather", "allgather all_gather_single _allgather_base all_gather_single_coalesced "
     "allgather_into_tensor_coalesced"),
    ("reduce_scatter", "reduce_scatter reduce_scatter_single _reduce_scatter_base reduce_scatter_single_coalesced "
     "reduce_scatter_tensor_coalesced"),
    ("all_to_all", "alltoall all_to_all_single alltoall_base"),
    *[(op, op) for op in ("broadcast", "scatter", "gather")],
] for method in methods.split()}  # fmt: skip
_COLLECTIVE = re.compile("gather|scatter|reduce|broadcast|all_?to_?all|send|recv")
_unknown = {n for n, v in vars(threaded.ProcessLocalGroup).items() if inspect.isfunction(v) and _COLLECTIVE.search(n)}
if _unknown := _unknown - FAMILIES.keys():
    raise ImportError(f"torch {torch.__version__}'s threaded group has collectives the audit does not know: {_unknown}")
_nesting = threading.local()  # a collective the threaded group runs through another is recorded once
_SKIPPED = (str(Path(torch.__file__).parent), sysconfig.get_paths()["stdlib"], str(Path(__file__).resolve()))


def where(frames: int = 3) -> list[str]:
    """The innermost calling frames outside torch, the standard library and this file."""
    stack = [f for f in traceback.extract_stack() if not f.filename.startswith(_SKIPPED)][::-1][:frames]
    files = [os.path.relpath(f.filename, ROOT) if f.filename.startswith(str(ROOT)) else f.filename for f in stack]
    return [f"{file}:{f.lineno} in {f.name}" for file, f in zip(files, stack)]


class CollectiveAudit:
    """Every tensor handed to a collective, counted by (op, method, device, dtype, shape); one whose
    device type is not `expected` is a violation, kept with the calling frames."""

    def __init__(self, expected: str):
        self.expected, self._lock = expected, threading.Lock()
        self.calls, self.tensors, self.violations = Counter(), Counter(), Counter()

    def check(self, method: str, rank: int, args) -> None:
        op = FAMILIES.get(method, method)
        with self._lock:
            self.calls[op] += 1
            for t in (leaf for leaf in tree_leaves(args) if isinstance(leaf, torch.Tensor)):
                key = (op, method, t.device.type, str(t.dtype).replace("torch.", ""), tuple(t.shape))
                self.tensors[key] += 1
                if t.device.type != self.expected:
                    self.violations[(*key, rank, tuple(where()))] += 1

    def summary(self) -> dict:
        fields, by_device = ("op", "method", "device", "dtype", "shape"), {}
        for (op, _, device, _, _), n in self.tensors.items():
            by_device.setdefault(op, Counter())[device] += n
        found = self.violations.items()
        return {
            "calls": dict(self.calls),
            "tensors_by_device": {op: dict(c) for op, c in by_device.items()},
            "tensors": [{**dict(zip(fields, key)), "count": n} for key, n in self.tensors.most_common()],
            "violations": [
                {**dict(zip(fields, k)), "rank": r, "where": list(w), "count": n} for (*k, r, w), n in found
            ],
        }


def _sync() -> None:  # the other rank's thread queued its work on streams of its own
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


class ThreadWorlds(threaded.ThreadLocalWorld):
    """torch's world per thread, with the torchcomms list torch 2.11's destroy_process_group reads."""

    if not hasattr(threaded.ThreadLocalWorld, "comms"):
        comms = property(lambda self: [])


class AuditGroup(threaded.ProcessLocalGroup):
    """torch's threaded process group, each collective checked by `audit` before it runs."""

    def __init__(self, rank: int, world_size: int, audit: CollectiveAudit):
        super().__init__(rank, world_size)
        self.audit = audit

    @property
    def _device_types(self) -> list[torch.device]:
        # NCCL's (a Python group has none): DCP's object collectives pick their device from it
        return [torch.device(self.audit.expected)]

    def _run(self, method: str, *args, **kwargs):
        parent = getattr(threaded.ProcessLocalGroup, "allreduce" if method == "barrier" else method)
        if getattr(_nesting, "active", False):
            return parent(self, *args, **kwargs)
        self.audit.check(method, self._rank, (args, kwargs))
        _nesting.active = True
        try:
            _sync()
            work = parent(self, *args, **kwargs)
            _sync()
        finally:
            _nesting.active = False
        return work

    def barrier(self, opts=None):  # the threaded group's all-reduces a host tensor; NCCL's works on the device
        return self._run("barrier", [torch.ones(1, device=self.audit.expected)])


for _method in FAMILIES.keys() & vars(threaded.ProcessLocalGroup).keys():
    setattr(AuditGroup, _method, functools.partialmethod(AuditGroup._run, _method))


@contextlib.contextmanager
def audited_world(audit: CollectiveAudit):
    """A torch.distributed world per thread, of AuditGroups; all it changes is restored, also on failure."""
    c10d = torch._C._distributed_c10d
    if not hasattr(c10d, "_set_thread_isolation_mode"):
        raise RuntimeError(f"torch {torch.__version__} cannot keep process group names per thread")
    saved = (dist.Backend._plugins.get(BACKEND.upper()), dist.Backend.backend_capability.get(BACKEND))
    world, multithreading = dist.distributed_c10d._world, torch._C._is_multithreading_enabled()
    fake_lock = getattr(ShardingPropagator, "_fake_mode_lock", None)  # torch >= 2.12 has one

    def create(store, rank: int, world_size: int, timeout):
        group = AuditGroup(rank, world_size, audit)
        threaded._store_based_barrier(rank, store, "", world_size, timeout)
        return group

    dist.Backend.register_backend(BACKEND, create, devices=[audit.expected])  # only it, as NCCL registers only cuda
    try:
        c10d._set_thread_isolation_mode(True)
        if fake_lock is not None:  # threads enter FakeTensorMode one at a time, as in torch's threaded tests
            ShardingPropagator._fake_mode_lock = threading.Lock()
        # also runs backward in the calling thread, not torch's one per device: FSDP2's backward hooks
        threaded._install_threaded_pg()  # of one rank wait in collectives for the other rank's
        dist.distributed_c10d._world = ThreadWorlds()
        yield
    finally:
        threaded._uninstall_threaded_pg()
        dist.distributed_c10d._world = world
        threaded.ProcessLocalGroup.reset()
        c10d._set_thread_isolation_mode(False)
        torch._C._set_multithreading_enabled(multithreading)
        if fake_lock is not None:
            ShardingPropagator._fake_mode_lock = fake_lock
        dist.Backend._plugins[BACKEND.upper()], dist.Backend.backend_capability[BACKEND] = saved


def run_ranks(world: int, fn, audit: CollectiveAudit, timeout: float = 600.0) -> None:
    """fn(rank) on `world` audited threads; the first failed rank's error, once all have ended."""
    errors: dict[int, BaseException] = {}
    with audited_world(audit):
        store = dist.HashStore()

        def rank_main(rank: int) -> None:
            try:
                dist.init_process_group(
                    BACKEND, rank=rank, world_size=world, store=store, timeout=datetime.timedelta(seconds=timeout)
                )
                fn(rank)
            except BaseException as error:  # noqa: B036 - handed to the caller
                errors[rank] = error
                threaded.ProcessLocalGroup.exception_handle(error)  # wakes the ranks waiting in a collective
            finally:
                if dist.is_initialized():
                    dist.destroy_process_group()

        threads = [threading.Thread(target=rank_main, args=(r,), daemon=True) for r in range(world)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in threads):
            threaded.ProcessLocalGroup.exception_handle(TimeoutError())
            for t in threads:
                t.join(10)
            raise TimeoutError(f"the {world} ranks did not end within {timeout:.0f} s")
    if errors:  # a SystemExit: the rank was woken by another's failure
        rank, error = min({r: e for r, e in errors.items() if not isinstance(e, SystemExit)}.items() or errors.items())
        raise RuntimeError(f"rank {rank} of {world} failed: {error!r}") from error


class Stop(Exception):
    """Ends the first half of the run after its checkpoint, on every rank at once."""


class AuditIO:
    """LoopIO of one rank: the data folder's splits, checkpoints in a folder shared by the ranks."""

    def __init__(self, plan: PretrainPlan, world: int, checkpoints: Path, stop_after: int | None):
        self.plan, self.world, self.checkpoints, self.stop_after = plan, world, checkpoints, stop_after

    @contextlib.contextmanager
    def start_point(self):
        found = sorted(self.checkpoints.glob("step_*"))
        yield loop.StartPoint(str(found[-1]), str(found[-1]), "resumed") if found else None

    def train_split(self) -> TrainSplit:
        return TrainSplit(f"{self.plan.data_dir}/train", self.plan.train.seed)

    def validation_batches(self):
        return ordered_batches(f"{self.plan.data_dir}/validation", self.plan.train.micro_batch(self.world) * self.world)

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        if checkpoint_dir:  # every rank adds its files, as Ray Train uploads them
            target = self.checkpoints / f"step_{metrics['step']:06d}"
            target.mkdir(parents=True, exist_ok=True)
            for name in os.listdir(checkpoint_dir):
                shutil.copy(os.path.join(checkpoint_dir, name), target / name)
        if metrics["step"] == self.stop_after:
            raise Stop


def run_loop(plan: PretrainPlan, world: int, device: torch.device, audit: CollectiveAudit, io: dict, timeout: float):
    """pretrain_loop on `world` audited ranks; loop.build_model one at a time: it seeds the generator the
    threads share (around build_training, a lock would deadlock: FSDP2 shards collectively)."""
    original, lock = loop.build_model, threading.Lock()

    def build_model(*args, **kwargs):
        with lock:
            return original(*args, **kwargs)

    def rank_main(rank: int) -> None:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        with contextlib.suppress(Stop):
            loop.pretrain_loop(plan, rank, world, device, AuditIO(plan, world, **io))

    loop.build_model = build_model
    try:
        run_ranks(world, rank_main, audit, timeout)
    finally:
        loop.build_model = original


SYNTHETIC = dict(vocab=61, predictions=3, lengths=(10, 24), train=32, validation=16)  # rows per batch of 8
OPTIONS = [  # (flag, type, default, help) of args.audit_*: DEFAULTS where bench/gpu_suite.py's args lack them
    ("world", int, 2, "ranks: threads that share the device"),
    ("data", str, None, "a data stage's folder (train/, validation/); default: a synthetic split, a tiny model"),
    ("preset", str, "base", "the model with --data"),
    ("vocab-size", int, 8000, "the vocabulary with --data"),
    ("steps", int, 6, "optimizer steps (at least 2): a checkpoint, stop and resume halfway"),
    ("batch", int, 8, "global batch size"),
    ("tolerance", float, None, "max abs weight difference from one rank's (default 1e-5; bf16 0.05)"),
    ("timeout", float, 600.0, "seconds a run of the ranks may take"),
]
DEFAULTS = {f"audit_{flag.replace('-', '_')}": default for flag, _, default, _ in OPTIONS}


def synthetic_data(folder: Path, batch: int) -> None:
    """train/ and validation/ as the data stage writes them: two parquet files of row groups of 4."""
    for seed, split in enumerate(("train", "validation")):
        n = SYNTHETIC[split] * batch // 8
        rows = static_rows(seed, n, SYNTHETIC["vocab"], SYNTHETIC["predictions"], SYNTHETIC["lengths"])
        table = pa.Table.from_pydict(rows, schema=example_schema(False))
        (folder / split).mkdir(parents=True)
        for part, rows in enumerate((table.slice(0, n // 2), table.slice(n // 2))):
            pq.write_table(rows, folder / split / f"part-{part:05d}-000.parquet", row_group_size=4)


def make_plan(args, data_dir: Path, out_dir: Path, device: torch.device) -> PretrainPlan:
    """The GPU worker's (bf16, LAMB, health) scaled down; fp32 on CPU; no compile (dynamo is not thread-safe)."""
    if args.audit_data:
        albert = AlbertConfig.from_preset(args.audit_preset, vocab_size=args.audit_vocab_size)
    else:
        albert = AlbertConfig(
            vocab_size=SYNTHETIC["vocab"], embedding_size=16, hidden_size=32, num_hidden_layers=3,
            num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
        )  # fmt: skip
    steps, batch = args.audit_steps, args.audit_batch
    train = TrainSection(
        global_batch_size=batch, max_steps=steps, lr=0.01, warmup_steps=1, optimizer="lamb", compile=False,
        precision="bf16" if device.type == "cuda" else "fp32", loader_processes=0, checkpoint_every=steps // 2,
        eval_every=2, eval_max_sequences=2 * batch, log_every=2,
    )  # fmt: skip
    reader = SliceReader(str(data_dir / "train"), batch, 0, 1, train.seed)
    return PretrainPlan(
        albert=albert, train=train, use_gpu=device.type == "cuda", precision=train.precision, masking=None,
        max_predictions=20 if args.audit_data else SYNTHETIC["predictions"],
        max_seq_length=albert.max_position_embeddings,
        n_train=reader.index.num_rows, n_validation=sum(map(len, ordered_batches(str(data_dir / "validation"), batch))),
        batches_per_epoch=reader.batches_per_epoch, data_dir=str(data_dir), out_dir=str(out_dir), spiece_model=None,
    )  # fmt: skip


def weight_differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(the max absolute difference, the L2 norm of the difference over `b`'s), over all tensors."""
    if a.keys() != b.keys():
        raise ValueError(f"the exports hold other tensors: {sorted(a.keys() ^ b.keys())}")
    pairs = [(a[k].double().flatten(), b[k].double().flatten()) for k in a]
    difference, reference = torch.cat([x - y for x, y in pairs]), torch.cat([y for _, y in pairs])
    return difference.abs().max().item(), (difference.norm() / reference.norm()).item()


def audit_run(args) -> dict:
    """The plan on args.audit_world ranks (stopped halfway and resumed) and on one: audits, weights apart."""
    started = time.perf_counter()
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    world, audits, exports, finals = args.audit_world, {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="collective-audit-") as tmp:
        data = Path(args.audit_data or f"{tmp}/data")
        if not args.audit_data:
            synthetic_data(data, args.audit_batch)
        for ranks in dict.fromkeys([world, 1]):
            out = Path(tmp) / f"world{ranks}"
            plan = make_plan(args, data, out, device)
            audits[ranks] = CollectiveAudit(device.type)
            for stop_after in dict.fromkeys([plan.train.checkpoint_every if ranks == world else None, None]):
                io = dict(checkpoints=out / "checkpoints", stop_after=stop_after)
                run_loop(plan, ranks, device, audits[ranks], io, args.audit_timeout)
            exports[ranks] = load_file(str(out / "hf" / "model.safetensors"))
            finals[str(ranks)] = json.loads((out / "eval.json").read_text())
    absolute, relative = weight_differences(exports[world], exports[1])
    tolerance = args.audit_tolerance or (0.05 if plan.precision == "bf16" else 1e-5)
    summaries = {str(r): a.summary() for r, a in audits.items()}
    return {
        "expected_device": device.type, "world": world, "precision": plan.precision, "steps": plan.train.max_steps,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
        "violations": [{"world": int(r), **v} for r, s in summaries.items() for v in s["violations"]],
        "tensors_by_device": {r: s["tensors_by_device"] for r, s in summaries.items()},
        "calls": {r: s["calls"] for r, s in summaries.items()},
        "max_abs_weight_difference": absolute, "relative_weight_difference": relative, "tolerance": tolerance,
        "weights_match": absolute <= tolerance, "final_validation": finals, "seconds": time.perf_counter() - started,
        "tensors": {r: s["tensors"] for r, s in summaries.items()},
    }  # fmt: skip


def audit_phase(args) -> dict:
    """bench/gpu_suite.py's collectives phase: the audit on args.device (cuda when there is one),
    also written to args.out/collective_audit.json; options args.audit_* (DEFAULTS where absent)."""
    options = {**DEFAULTS, "device": "cuda" if torch.cuda.is_available() else "cpu", **vars(args)}
    result = audit_run(argparse.Namespace(**options))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "collective_audit.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "collective-audit-out")))
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    for flag, kind, default, text in OPTIONS:
        p.add_argument(f"--{flag}", dest=f"audit_{flag.replace('-', '_')}", type=kind, default=default, help=text)
    result = audit_phase(p.parse_args())
    print(json.dumps({k: v for k, v in result.items() if k != "tensors"}, indent=2))
    sys.exit(1 if result["violations"] or not result["weights_match"] else 0)


if __name__ == "__main__":
    main()
