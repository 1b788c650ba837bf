"""Training health in the pretraining loop itself (pipelines/train/loop.py on plain gloo processes,
as tests/pipelines/train/test_loop.py runs it): a NaN on one worker is skipped on every worker,
repeated NaNs roll back with a lower learning rate, a spike under the rollback policy restores the
checkpoint exactly, too many rollbacks stop the run, and health checks without events change nothing."""

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from pipelines.config.health import HealthSection
from pipelines.train import loop
from pipelines.train.checkpoint import load_checkpoint
from pipelines.train.loop import build_training
from tests.faults import Faults
from tests.pipelines.train import test_loop
from tests.pipelines.train.test_loop import assert_close, make_plan, run

pytestmark = pytest.mark.slow


def events(out_dir: Path) -> list[dict]:
    lines = (out_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "event" in r and r["event"] not in ("started", "resumed", "resized")]


def reported(out_dir: Path, rank: int) -> list[tuple[str, int]]:
    path = out_dir / f"events_rank{rank}.jsonl"
    return [(r["event"], r["step"]) for r in map(json.loads, path.read_text().splitlines())] if path.exists() else []


def _gathering_process(rank, world, plan, checkpoints, stop_after, store, faults):
    """_process, and each rank saves the full parameters it ends with (gathered from the shards)."""
    original = loop.get_model_state_dict

    def gather(model, options=None):
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        torch.save({k: v.detach().clone() for k, v in full.items()}, Path(checkpoints).parent / f"final_rank{rank}.pt")
        return original(model, options=options)

    loop.get_model_state_dict = gather
    test_loop._process(rank, world, plan, checkpoints, stop_after, store, faults)


def _rollback_capturing_process(rank, world, plan, checkpoints, stop_after, store, faults):
    """_process, and rank 0 saves the parameters right after each rollback's restore."""
    original, count = loop.restore_snapshot, [0]

    def restore(snapshot, model, optimizer, scheduler):
        original(snapshot, model, optimizer, scheduler)
        count[0] += 1
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
        if rank == 0:
            state = {k: v.detach().clone() for k, v in full.items()}
            torch.save(state, Path(checkpoints).parent / f"rolled_back_{count[0]}_to_{snapshot.step}.pt")
        dist.barrier()

    loop.restore_snapshot = restore
    test_loop._process(rank, world, plan, checkpoints, stop_after, store, faults)


def test_a_nan_on_one_worker_is_skipped_on_every_worker(tmp_path):
    """Acceptance 1: the last worker's loss is NaN at step 3; both workers skip the step (the
    decision follows all-reduced numbers), the parameters stay finite and the same on both, and the
    run ends where one that skipped batch 3 by construction does."""
    nan = run(tmp_path, "nan", 2, faults=Faults(nan_steps=(3,)), target=_gathering_process)
    out = tmp_path / "nan"
    assert [(e["event"], e["step"], e["reason"]) for e in events(out)] == [("skipped", 3, "non-finite loss")]
    assert reported(out, 0) == reported(out, 1) == [("skipped", 3)]
    ranks = [torch.load(out / f"final_rank{r}.pt") for r in (0, 1)]
    assert all(torch.isfinite(t).all() for t in ranks[0].values())
    assert_close(ranks[0], ranks[1], atol=0.0)
    by_construction = run(tmp_path, "skip", 1, faults=Faults(skip_steps=(3,)))
    assert_close(nan, by_construction)
    reference = run(tmp_path, "plain", 1)
    assert max((nan[k] - reference[k]).abs().max().item() for k in nan) > 1e-4  # the skip changed the run
    summary = [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("step") == 3]
    assert any(r.get("skipped_steps") == 1 and r["mlm_loss"] is None for r in summary), summary


def test_repeated_nans_roll_back_with_a_lower_learning_rate(tmp_path):
    """Acceptance 2: NaNs at steps 3 and 4 with max_skipped_in_a_row=2 roll the run back to its step-2
    checkpoint with half the learning rate; the run completes with finite weights."""
    health = HealthSection(max_skipped_in_a_row=2)
    weights = run(tmp_path, "nans", 2, faults=Faults(nan_steps=(3, 4)), health=health)
    assert all(torch.isfinite(t).all() for t in weights.values())
    found = events(tmp_path / "nans")
    assert [(e["event"], e["step"]) for e in found] == [("skipped", 3), ("skipped", 4), ("rollback", 4)]
    rollback = found[-1]
    assert rollback["to_step"] == 2 and rollback["lr_scale"] == pytest.approx(0.5)
    lines = [json.loads(x) for x in (tmp_path / "nans" / "metrics.jsonl").read_text().splitlines()]
    after = [r for r in lines[lines.index(rollback) :] if "lr" in r]
    full = [r for r in lines[: lines.index(rollback)] if "lr" in r]
    # the replayed step 3 runs at half the rate the first pass had
    assert [r["step"] for r in after][:2] == [3, 4]
    assert after[0]["lr"] == pytest.approx(0.5 * next(r["lr"] for r in full if r["step"] == 3))


def test_more_rollbacks_than_allowed_stop_the_run(tmp_path):
    health = HealthSection(max_skipped_in_a_row=1, max_rollbacks=0)
    with pytest.raises(Exception, match="train.health.max_rollbacks=0"):
        run(tmp_path, "diverged", 1, faults=Faults(nan_steps=(3,)), health=health)


def test_a_spike_under_the_rollback_policy_restores_the_checkpoint_exactly(tmp_path):
    """Acceptance 3: the loss at step 10 is 100 times larger on the last worker; under `rollback` the
    run goes back to its step-8 checkpoint (parameters equal to the checkpoint's within 1e-7),
    skips batch 10 on the replay and ends where a run that skipped it by construction does."""
    health = HealthSection(spike_policy="rollback", spike_window=8, spike_threshold=20.0)
    spiked = run(
        tmp_path, "spike", 2, faults=Faults(spike_steps=(10,)), target=_rollback_capturing_process,
        max_steps=12, health=health,
    )  # fmt: skip
    out = tmp_path / "spike"
    found = events(out)
    assert [(e["event"], e["step"]) for e in found] == [("spike", 10), ("rollback", 10), ("skipped", 10)], found
    assert found[1]["to_step"] == 8 and found[1]["skip_steps"] == [10]
    restored = torch.load(out / "rolled_back_1_to_8.pt")
    model, optimizer, scheduler = build_training(make_plan(out, tmp_path / "data", 1), 1, torch.device("cpu"))
    load_checkpoint(str(out / "checkpoints" / "step_000008"), model, optimizer, scheduler)
    saved = model.state_dict()
    assert max((restored[k] - saved[k]).abs().max().item() for k in restored) <= 1e-7
    by_construction = run(tmp_path, "skip10", 1, faults=Faults(skip_steps=(10,)), max_steps=12, health=health)
    assert_close(spiked, by_construction)


def test_health_checks_without_events_change_nothing(tmp_path):
    """Acceptance 6: with the checks on and nothing wrong, the parameters are those of a run without them."""
    on = run(tmp_path, "on", 1)
    off = run(tmp_path, "off", 1, health=HealthSection(enabled=False))
    assert_close(on, off, atol=0.0)
    assert events(tmp_path / "on") == []


def _order_recording_process(rank, world, plan, checkpoints, stop_after, store, faults):
    """_process, and it writes when each step was queued and when its metrics were first read (the
    file is rewritten at each event: the process ends without running finally blocks)."""
    original, log, path = loop.train_step, [], Path(checkpoints).parent / "order.json"

    def note(event: tuple[str, int]) -> None:
        log.append(event)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(log))

    def step(*args, **kwargs):
        pending, number = original(*args, **kwargs), sum(1 for kind, _ in log if kind == "queued") + 1
        note(("queued", number))
        read = pending.get

        def get():
            if pending.read is None:
                note(("read", number))
            return read()

        pending.get = get
        return pending

    loop.train_step = step
    test_loop._process(rank, world, plan, checkpoints, stop_after, store, faults)


def test_under_the_warn_policy_a_step_is_read_after_the_next_is_queued(tmp_path):
    """No wait for the device between steps: step k's loss is read while step k + 1 runs, except at
    the steps that log, validate or checkpoint (here 4 and 8: every metric is read there)."""
    run(tmp_path, "order", 1, target=_order_recording_process, max_steps=8, log_every=4, checkpoint_every=4)
    order = [tuple(x) for x in json.loads((tmp_path / "order" / "order.json").read_text())]
    position = {event: i for i, event in enumerate(order)}
    for k in (1, 2, 3, 5, 6, 7):
        assert position[("read", k)] > position[("queued", k + 1)], order
    for k in (4, 8):
        assert position[("read", k)] < position.get(("queued", k + 1), len(order)), order


def test_a_rollback_found_a_step_late_ends_where_the_checked_run_does(tmp_path):
    """NaNs at steps 4 and 5 (two in a row: a rollback to the step-3 checkpoint). Under warn the
    rollback is found while step 6 runs; under skip each step is checked before its update. Same
    events, same weights."""
    kwargs = dict(max_steps=9, checkpoint_every=3, log_every=4, faults=Faults(nan_steps=(4, 5)))
    late = run(tmp_path, "late", 2, health=HealthSection(max_skipped_in_a_row=2), **kwargs)
    checked = run(tmp_path, "checked", 2, health=HealthSection(max_skipped_in_a_row=2, spike_policy="skip"), **kwargs)
    found = [(e["event"], e["step"]) for e in events(tmp_path / "late")]
    assert found == [("skipped", 4), ("skipped", 5), ("rollback", 5)]
    assert found == [(e["event"], e["step"]) for e in events(tmp_path / "checked")]
    assert_close(late, checked, atol=0.0)
