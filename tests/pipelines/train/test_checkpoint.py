"""A one-rank checkpoint leaves the process's threads as they were: DCP's collectives would start an
OpenMP team in a gloo thread, and once libgomp's teams outnumber the CPUs every idle helper sleeps
instead of spinning, which slowed every later training step (docs/BENCHMARKS.md, make run)."""

import subprocess
import sys

SCRIPT = r"""
import os, tempfile, threading, torch, torch.distributed as dist
from torch.optim.lr_scheduler import LambdaLR
from albert_model import AlbertConfig, AlbertForPreTraining
from pipelines.train.checkpoint import load_checkpoint, save_checkpoint

def threads():
    return len(os.listdir("/proc/self/task"))

def train():  # as on a Ray Train worker: in a thread of its own, under a one-rank gloo group
    torch.set_num_threads(2)
    model = AlbertForPreTraining(AlbertConfig.from_preset("tiny", vocab_size=8000))
    optimizer = torch.optim.AdamW(model.parameters())
    ids = torch.randint(5, 8000, (16, 128))
    out = model(ids, torch.zeros_like(ids), torch.ones_like(ids), torch.randint(0, 128, (16, 20)))
    (out.mlm_logits.logsumexp(-1).mean() + out.sop_logits.logsumexp(-1).mean()).backward()  # its OpenMP team
    optimizer.step()
    before = threads()
    with tempfile.TemporaryDirectory() as d:
        save_checkpoint(d, model, optimizer, LambdaLR(optimizer, lambda s: 1.0), 1)
        load_checkpoint(d, model, optimizer, LambdaLR(optimizer, lambda s: 1.0))
    print(before, threads())

os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
dist.init_process_group("gloo", rank=0, world_size=1)
t = threading.Thread(target=train)
t.start()
t.join()
"""


def test_a_one_rank_checkpoint_starts_no_thread():
    from tests.conftest import free_port

    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env={"OMP_NUM_THREADS": "1", "PORT": str(free_port()), "PATH": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    assert after == before, f"{after - before} more thread(s) after a checkpoint"
