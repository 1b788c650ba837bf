"""The fused LAMB step (pipelines/train/fused_lamb.py: Triton kernels) against the multi-tensor one,
on the CPU through Triton's interpreter (TRITON_INTERPRET=1, set before Triton is imported, so in a
child process): the same parameters and moments over several steps of two groups whose tensors
cross block boundaries, a step that the device flag skips leaves everything as it was, and the
update lands in place in the local tensors. tests/pipelines/train/test_gpu.py checks it on CUDA."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]

CHILD = r"""
import json
import torch
from pipelines.train import fused_lamb
from pipelines.train.lamb import Lamb

assert fused_lamb.interpreted()
SHAPES = [(300, 7), (1500,), (1024,), (1,), (5,), (2049,)]  # 2,100 / 1,500 / one whole block / tiny / 2 blocks + 1

def build(fused):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    params[3].data.zero_()  # a zero weight: trust ratio 1
    groups = [
        {"params": params[:4], "weight_decay": 0.01, "adapt": True},
        {"params": params[4:], "weight_decay": 0.0, "adapt": False},
    ]
    return params, Lamb(groups, lr=0.05, fused=fused)

ours, fused = build(True)
reference, foreach = build(False)
result = {"steps": []}
for step in range(5):
    grads = [torch.randn(s) for s in SHAPES]
    before = [p.detach().clone() for p in ours]
    moments = [fused.state[p]["exp_avg"].clone() for p in ours] if step else None
    apply = torch.tensor([0 if step == 3 else 1], dtype=torch.int32)
    for p, g in zip(ours, grads):
        p.grad = g.clone()
    for p, g in zip(reference, grads):
        p.grad = g.clone()
    if step == 4:  # no flag: the step applies (the fused step's own kept flag)
        fused.step()
        foreach.step()
    else:
        fused.step(apply=apply)
        foreach.step(apply=apply)
    result["steps"].append({
        "max_param_difference": max((a - b).abs().max().item() for a, b in zip(ours, reference)),
        "max_moment_difference": max(
            (fused.state[a][k] - foreach.state[b][k]).abs().max().item()
            for a, b in zip(ours, reference) for k in ("exp_avg", "exp_avg_sq")
        ),
        "changed": any(not torch.equal(a, b) for a, b in zip(ours, before)),
        "moments_changed": moments is not None and any(
            not torch.equal(fused.state[p]["exp_avg"], m) for p, m in zip(ours, moments)
        ),
    })
print(json.dumps(result))
"""


def test_the_fused_step_equals_the_multi_tensor_step_and_skips_on_its_flag():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    steps = json.loads(done.stdout.strip().splitlines()[-1])["steps"]
    for step in steps:
        assert step["max_param_difference"] < 1e-6, steps
        assert step["max_moment_difference"] < 1e-6, steps
    assert [s["changed"] for s in steps] == [True, True, True, False, True]  # step 3's flag is 0
    assert [s["moments_changed"] for s in steps][1:] == [True, True, False, True]
