"""Training health's decisions (pipelines/train/health.py) on numbers, without a model; and the
report's section and curve markers for its events."""

import math

import pytest

from pipelines.config import TrainSection, load_config
from pipelines.config.health import HealthSection
from pipelines.errors import ConfigError
from pipelines.report import markdown
from pipelines.report.plots import pretraining_curves
from pipelines.train.health import HealthMonitor, TrainingDiverged, describe, plateau_causes


def monitor(**health) -> HealthMonitor:
    train = TrainSection(global_batch_size=64, warmup_steps=10, max_steps=1000)
    return HealthMonitor(HealthSection(**{"spike_window": 8, **health}), train)


def test_non_finite_steps_are_skipped_then_rolled_back():
    m = monitor(max_skipped_in_a_row=2)
    assert m.check_step(1, 5.0, 1.0) == ("apply", None)
    action, event = m.check_step(2, math.nan, 1.0)
    assert action == "skip" and event["reason"] == "non-finite loss" and event["loss"] == "nan"
    action, event = m.check_step(3, 5.0, math.inf)
    assert action == "rollback" and event["reason"] == "non-finite gradient norm" and event["in_a_row"] == 2
    assert m.rolled_back(event) == 0.5  # the learning-rate factor
    assert m.check_step(3, math.nan, 1.0)[0] == "skip"  # the count starts again after a rollback
    assert m.check_step(4, 5.0, 1.0)[0] == "apply"
    assert m.check_step(5, math.nan, 1.0)[0] == "skip"  # not in a row with the one before


def test_too_many_rollbacks_stop_with_what_happened():
    m = monitor(max_skipped_in_a_row=1, max_rollbacks=1)
    m.rolled_back(m.check_step(1, math.nan, 1.0)[1])
    with pytest.raises(TrainingDiverged, match=r"step 2: it needed rollback 2 \(non-finite loss\).*max_rollbacks=1"):
        m.rolled_back(m.check_step(2, math.nan, 1.0)[1])


@pytest.mark.parametrize(("policy", "action"), [("warn", "apply"), ("skip", "skip"), ("rollback", "rollback")])
def test_a_loss_above_the_robust_band_is_a_spike(policy, action):
    m = monitor(spike_policy=policy)
    for step, loss in enumerate([5.0, 5.1, 4.9, 5.0, 5.2, 4.8, 5.0, 5.1], start=1):
        assert m.check_step(step, loss, 1.0) == ("apply", None)
    assert m.check_step(9, 5.3, 1.0) == ("apply", None)  # inside the band (and under 5% above the median)
    got, event = m.check_step(10, 9.0, 1.0)
    assert got == action and event["event"] == "spike" and event["policy"] == policy
    assert event["median"] == pytest.approx(5.05) and event["limit"] < 9.0
    if policy == "rollback":
        assert m.rolled_back(event) == 1.0 and m.skip_steps == {10}  # the replay skips the spiking batch
        assert m.check_step(10, 5.0, 1.0)[0] == "skip"


def test_no_spike_before_the_window_fills():
    m = monitor()
    assert [m.check_step(s, loss, 1.0)[0] for s, loss in enumerate([5.0, 50.0, 5.0], 1)] == ["apply"] * 3


def test_a_validation_collapse_follows_the_policy():
    m = monitor(spike_policy="rollback", validation_drop=0.5)
    assert m.check_validation(100, {"mlm_accuracy": 0.45, "sop_loss": 0.5, "sop_accuracy": 0.8}, None) == ("apply", [])
    action, events = m.check_validation(200, {"mlm_accuracy": 0.06, "sop_loss": 0.5, "sop_accuracy": 0.8}, None)
    assert action == "rollback" and events[0]["event"] == "collapse" and events[0]["best_mlm_accuracy"] == 0.45


def test_the_plateau_warning_names_the_numbers_and_the_causes():
    m = monitor(plateau_after_steps=100)
    baseline = 0.069
    result = {"mlm_accuracy": 0.071, "sop_loss": 0.693, "sop_accuracy": 0.5}
    assert m.check_validation(100, result, baseline) == ("apply", [])  # before warm-up + plateau_after_steps
    _, events = m.check_validation(110, result, baseline)
    assert [e["event"] for e in events] == ["plateau"]
    message = events[0]["message"]
    assert "0.071 at step 110" in message and "unigram baseline 0.069" in message
    assert "LAMB at a global batch of 64" in message and "lr 0.00176 is high for a batch of 64" in message
    assert m.check_validation(120, result, baseline) == ("apply", [])  # said once


def test_off_the_plateau_with_sop_at_chance_is_a_note_not_a_warning():
    m = monitor(plateau_after_steps=0)
    baseline = 0.069
    _, events = m.check_validation(10, {"mlm_accuracy": 0.13, "sop_loss": 0.6932, "sop_accuracy": 0.51}, baseline)
    assert [e["event"] for e in events] == ["note"] and "expected early" in events[0]["message"]
    # without a sentence objective (data.sentence_objective=none) there is no SOP to be at chance
    none = {"mlm_accuracy": 0.13, "sop_loss": None, "sop_accuracy": None}
    assert monitor(plateau_after_steps=0).check_validation(10, none, baseline) == ("apply", [])


def test_plateau_causes_follow_the_config():
    adamw = TrainSection(optimizer="adamw", lr=0.001, global_batch_size=16, warmup_steps=100, max_steps=3000)
    assert not any("LAMB" in c or "lr" in c for c in plateau_causes(adamw))
    short = TrainSection(global_batch_size=4096, warmup_steps=0, max_steps=1000)
    assert any("warm-up of 0 steps" in c for c in plateau_causes(short))


def test_health_keys_are_checked_and_named():
    with pytest.raises(ConfigError, match=r"train.health.spike_policy='maybe': must be one of warn, skip, rollback"):
        load_config(None, ["train.health.spike_policy=maybe"])
    with pytest.raises(ConfigError, match=r"train.health.rollback_lr_factor=0.0: must be in \(0, 1\]"):
        load_config(None, ["train.health.rollback_lr_factor=0.0"])
    with pytest.raises(ConfigError, match=r"unknown config key 'train.health.max_nans'; train.health has: enabled"):
        load_config(None, ["train.health.max_nans=3"])
    config = load_config(None, ["train.health.max_rollbacks=5", "train.health.spike_policy=skip"])
    assert (config.train.health.max_rollbacks, config.train.health.spike_policy) == (5, "skip")
    assert config.train.health.max_skipped_in_a_row == HealthSection().max_skipped_in_a_row  # the others stay


def test_the_report_lists_the_events_and_marks_them_on_the_curves():
    events = [
        {"event": "skipped", "step": 3, "reason": "non-finite loss", "loss": "nan", "grad_norm": "nan", "in_a_row": 1},
        {"event": "rollback", "step": 4, "to_step": 2, "reason": "non-finite loss", "rollbacks": 1,
         "lr_scale": 0.5, "skip_steps": []},
    ]  # fmt: skip
    section = markdown.health_section({"steps": 6}, events)
    assert "1 skipped, 1 rollback" in section
    assert "step 4 rollback 1 (non-finite loss) to the checkpoint of step 2; lr now x0.5" in section
    assert describe(events[0]) in section
    assert "No event" in markdown.health_section({"steps": 6}, [])
    train = [{"step": s, "mlm_loss": 5.0, "lr": 0.001} for s in range(1, 7)]
    assert pretraining_curves(train, [], events) != pretraining_curves(train, [], [])
