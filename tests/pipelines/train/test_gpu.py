"""The GPU path of pretraining (CUDA only: skipped without it, and a skip is never a pass). On one
GPU: FSDP2 equals the unsharded model, torch.compile equals eager, bf16 stays within its tolerance
of fp32, and the multi-tensor LAMB equals the per-tensor one on sharded parameters.
`python bench/gpu_suite.py` runs these with the GPU benchmarks."""

import math

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from albert_model import AlbertConfig, AlbertForPreTraining
from bench.synthetic_rows import static_rows
from pipelines.train.batching import collate
from pipelines.train.groups import parameter_groups
from pipelines.train.lamb import Lamb
from pipelines.train.loader import to_device
from pipelines.train.parallel import apply_compile, apply_fsdp
from pipelines.train.schedule import build_scheduler
from pipelines.train.step import train_step
from tests.faults import scaled_loss

pytestmark = pytest.mark.gpu

CONFIG = AlbertConfig(
    vocab_size=1000,
    embedding_size=64,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=1024,
    max_position_embeddings=128,
)
BATCH, PREDICTIONS = 16, 12


@pytest.fixture(scope="module")
def one_gpu(tmp_path_factory):
    """A one-rank NCCL process group on GPU 0, as a one-GPU Ray Train worker has."""
    torch.cuda.set_device(0)
    store = tmp_path_factory.mktemp("nccl") / "store"
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
    yield torch.device("cuda", 0)
    dist.destroy_process_group()


def batch(step: int, device: torch.device, full: bool = False) -> dict:
    """A collated batch of variable-length (or, `full`, equal-length) static-masked examples."""
    rows = static_rows(step, BATCH, CONFIG.vocab_size, PREDICTIONS, (128, 128) if full else (40, 128))
    return to_device(collate(rows, PREDICTIONS), device)


def fresh(device: torch.device) -> AlbertForPreTraining:
    torch.manual_seed(0)
    return AlbertForPreTraining(CONFIG).to(device)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().float() for k, v in model.state_dict().items()
    }


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def assert_states_close(a: dict, b: dict, relative: float, absolute: float) -> None:
    """All parameters together within `relative` (norm of the difference over the norm), and each
    element within `absolute`. Not each tensor relative to itself: the attention key bias has an
    exactly zero gradient (softmax ignores a per-query constant), so it holds rounding noise that
    the optimizer scales; relative to its own near-zero norm that noise is large."""
    assert a.keys() == b.keys()
    assert relative_error(torch.cat([a[k].flatten() for k in a]), torch.cat([b[k].flatten() for k in a])) < relative
    for name in a:
        assert (a[name] - b[name]).abs().max().item() < absolute, name


def train(model: torch.nn.Module, device: torch.device, steps: int = 3, foreach: bool = True) -> list[float]:
    optimizer = Lamb(parameter_groups(model.named_parameters(), 0.01), lr=1e-2, foreach=foreach)
    scheduler = build_scheduler(optimizer, warmup_steps=1, total_steps=10)
    return [train_step(model, optimizer, scheduler, [batch(s, device)], 1.0).get().loss for s in range(steps)]


def test_fsdp2_on_one_gpu_equals_the_unsharded_model(one_gpu):
    plain, sharded = fresh(one_gpu), fresh(one_gpu)
    apply_fsdp(sharded, init_device_mesh("cuda", (1,)))
    assert train(sharded, one_gpu) == pytest.approx(train(plain, one_gpu), rel=1e-5)
    assert_states_close(full_state(sharded), full_state(plain), relative=1e-5, absolute=1e-5)


def test_compile_equals_eager(one_gpu):
    eager, compiled = fresh(one_gpu), fresh(one_gpu)
    apply_compile(compiled)
    losses = {}
    for name, model in (("eager", eager), ("compiled", compiled)):
        b = batch(0, one_gpu)
        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_positions"])
        losses[name] = torch.nn.functional.cross_entropy(out.mlm_logits.flatten(0, 1), b["masked_lm_ids"].flatten())
        losses[name].backward()
    assert relative_error(losses["compiled"], losses["eager"]) < 1e-5
    grads = [{n: p.grad for n, p in model.named_parameters() if p.grad is not None} for model in (compiled, eager)]
    assert_states_close(*grads, relative=1e-4, absolute=1e-5)
    eager.zero_grad(set_to_none=True)
    compiled.zero_grad(set_to_none=True)
    assert train(compiled, one_gpu) == pytest.approx(train(eager, one_gpu), rel=1e-4)


def test_bf16_training_stays_within_its_tolerance_of_fp32(one_gpu):
    """The worker's bf16 (FSDP2 mixed precision: bf16 parameters and activations, fp32 gradient
    reduction and master weights) against fp32 on the same weights and batch."""
    fp32, bf16 = fresh(one_gpu), fresh(one_gpu)
    mesh = init_device_mesh("cuda", (1,))
    apply_fsdp(fp32, mesh)
    apply_fsdp(bf16, mesh, torch.bfloat16)
    b = batch(0, one_gpu, full=True)
    grads = []
    for model in (fp32, bf16):
        out = model(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_positions"])
        assert out.mlm_logits.dtype == (torch.bfloat16 if model is bf16 else torch.float32)
        loss = torch.nn.functional.cross_entropy(out.mlm_logits.float().flatten(0, 1), b["masked_lm_ids"].flatten())
        loss.backward()
        flat = [p.grad.full_tensor().flatten() for p in model.parameters() if p.grad is not None]
        grads.append((loss.detach(), torch.cat(flat)))
    (loss32, grad32), (loss16, grad16) = grads
    assert relative_error(loss16, loss32) < 1e-2
    assert relative_error(grad16, grad32) < 5e-2  # bf16 operands: 1e-3 to 1e-2 per product, more after 4 layers


def test_multi_tensor_lamb_equals_per_tensor_on_sharded_parameters(one_gpu):
    mesh = init_device_mesh("cuda", (1,))
    models = {}
    for foreach in (False, True):
        models[foreach] = fresh(one_gpu)
        apply_fsdp(models[foreach], mesh)
        train(models[foreach], one_gpu, foreach=foreach)
    assert_states_close(full_state(models[True]), full_state(models[False]), relative=1e-6, absolute=1e-6)


def test_a_batch_without_padding_runs_without_a_mask(one_gpu):
    """No mask lets SDPA pick flash or cuDNN attention; the result is the masked one."""
    b = batch(0, one_gpu, full=True)
    assert b["attention_mask"] is None
    model = fresh(one_gpu).eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        ones = torch.ones_like(b["input_ids"])
        masked = model(b["input_ids"], b["token_type_ids"], ones, b["masked_positions"]).mlm_logits
        unmasked = model(b["input_ids"], b["token_type_ids"], None, b["masked_positions"]).mlm_logits
    assert relative_error(unmasked.float(), masked.float()) < 1e-2


def test_the_fused_lamb_step_equals_the_multi_tensor_step_on_sharded_parameters(one_gpu):
    mesh = init_device_mesh("cuda", (1,))
    models, optimizers = {}, {}
    for fused in (False, True):
        models[fused] = fresh(one_gpu)
        apply_fsdp(models[fused], mesh)
        optimizers[fused] = Lamb(parameter_groups(models[fused].named_parameters(), 0.01), lr=1e-2, fused=fused)
        scheduler = build_scheduler(optimizers[fused], warmup_steps=1, total_steps=10)
        for s in range(3):
            train_step(models[fused], optimizers[fused], scheduler, [batch(s, one_gpu)], 1.0)
    assert all(o.state for o in optimizers.values())
    assert_states_close(full_state(models[True]), full_state(models[False]), relative=1e-6, absolute=1e-6)


def optimizer_state(optimizer: torch.optim.Optimizer) -> dict[tuple[int, str], torch.Tensor]:
    """Every tensor of the optimizer's state, whole (DTensors gathered), by (parameter, name)."""
    return {
        (i, name): (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
        for i, state in optimizer.state_dict()["state"].items()
        for name, v in state.items()
        if torch.is_tensor(v)
    }


@pytest.mark.parametrize("optimizer", ["lamb", "adamw"])
def test_a_non_finite_step_is_skipped_on_the_device_without_a_host_read(one_gpu, optimizer):
    """train_step(guard=True), as the loop runs it under the warn policy: a finite step is applied,
    a NaN step leaves the parameters and the optimizer's state as they were, and neither waits for
    the device (torch.cuda's sync debug mode raises on a synchronising call)."""
    from pipelines.train.build import build_optimizer

    model = fresh(one_gpu)
    apply_fsdp(model, init_device_mesh("cuda", (1,)), torch.bfloat16)
    opt = build_optimizer(model, optimizer, 1e-2, 0.01)
    scheduler = build_scheduler(opt, warmup_steps=1, total_steps=10)
    assert isinstance(opt, Lamb) or opt.defaults["fused"]
    batches = [[batch(s, one_gpu)] for s in range(3)]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        train_step(model, opt, scheduler, batches[0], 1.0, guard=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    before = {k: v.clone() for k, v in full_state(model).items()}  # full_state may alias the parameters
    moments = optimizer_state(opt)
    torch.cuda.set_sync_debug_mode("error")
    try:
        with scaled_loss(float("nan")):  # this step's loss is NaN
            pending = train_step(model, opt, scheduler, batches[1], 1.0, guard=True)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert not math.isfinite(pending.get().loss)
    after = full_state(model)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert moments.keys() == optimizer_state(opt).keys()
    for key, value in optimizer_state(opt).items():
        assert torch.equal(moments[key], value), key
    train_step(model, opt, scheduler, batches[2], 1.0, guard=True)
    assert any(not torch.equal(before[k], v) for k, v in full_state(model).items())


def test_mlm_only_pretraining_trains_on_the_gpu_and_leaves_the_sentence_head_as_it_started(one_gpu):
    """data.sentence_objective=none on the worker's GPU path (bf16 FSDP2, the fused LAMB, the
    guarded step): batches without sentence labels train the encoder with no synchronising call,
    and the frozen sentence head and pooler stay bit for bit as they started."""
    from pipelines.train.build import build_model, build_optimizer

    model = build_model(CONFIG, None, 0, sentence_objective=False).to(one_gpu)
    frozen = {name for name, p in model.named_parameters() if not p.requires_grad}
    assert frozen and all(n.startswith(("sop_classifier.", "albert.pooler.")) for n in frozen)
    apply_fsdp(model, init_device_mesh("cuda", (1,)), torch.bfloat16)
    opt = build_optimizer(model, "lamb", 1e-2, 0.01)
    scheduler = build_scheduler(opt, warmup_steps=1, total_steps=10)
    batches = []
    for s in range(3):
        rows = static_rows(s, BATCH, CONFIG.vocab_size, PREDICTIONS, (40, 128))
        del rows["sentence_order_label"]
        batches.append([to_device(collate(rows, PREDICTIONS), one_gpu)])
    before = {k: v.clone() for k, v in full_state(model).items()}
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pending = [train_step(model, opt, scheduler, b, 1.0, guard=True) for b in batches]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    results = [p.get() for p in pending]
    assert all(r.sop_loss is None and math.isfinite(r.loss) for r in results)
    after = full_state(model)
    assert frozen <= after.keys()
    for name in after:
        if name in frozen:
            assert torch.equal(before[name], after[name]), name
    assert all(not torch.equal(before[n], after[n]) for n in after if n not in frozen and "key.bias" not in n)
