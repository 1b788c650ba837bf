"""cluster/spot_fallback.py with Ray's own v1 autoscaler code: which node types `get_nodes_for`
launches for the launcher configs' demands, before and after a failed spot launch, and how a
failed launch reaches the record the scorer reads."""

import functools
import importlib
import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.constants import (
    AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S,
    AUTOSCALER_UTILIZATION_SCORER_KEY,
)
from ray.autoscaler._private.event_summarizer import EventSummarizer
from ray.autoscaler._private.loader import load_function_or_class
from ray.autoscaler._private.node_launcher import BaseNodeLauncher
from ray.autoscaler._private.node_provider_availability_tracker import NodeProviderAvailabilityTracker
from ray.autoscaler._private.resource_demand_scheduler import _default_utilization_scorer, get_nodes_for
from ray.autoscaler._private.util import ConcurrentCounter, prepare_config
from ray.autoscaler.node_launch_exception import NodeLaunchException

from .checks import SPOT_SUFFIX, ray_start_env

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
CPU_WORK = [{"CPU": 1}] * 64  # two 32-CPU nodes' worth of Ray Data tasks
GPU_WORK = [{"CPU": 8, "GPU": 1}] * 8  # two 4-GPU nodes' worth of training workers


@pytest.fixture(scope="module")
def spot_fallback():
    sys.path.insert(0, str(CLUSTER))  # what PYTHONPATH=$HOME/albert-ray/cluster does on the head
    try:
        yield importlib.import_module("spot_fallback")
    finally:
        sys.path.remove(str(CLUSTER))


@pytest.fixture(params=["aws.yaml", "gcp.yaml"])
def cluster(request, spot_fallback, tmp_path, monkeypatch):
    """The prepared launcher config, also written where the head's autoscaler reads it."""
    config = prepare_config(yaml.safe_load((CLUSTER / request.param).read_text()))
    bootstrap = tmp_path / "ray_bootstrap_config.yaml"
    bootstrap.write_text(json.dumps(config))  # `ray up` writes it as JSON
    monkeypatch.setattr(spot_fallback, "BOOTSTRAP_CONFIG", str(bootstrap))
    return config


def tracker_after(failures: dict[str, bool]) -> NodeProviderAvailabilityTracker:
    """Ray's tracker after one launch per node type: failed (True) or succeeded (False)."""
    tracker = NodeProviderAvailabilityTracker()
    for node_type, failed in failures.items():
        error = NodeLaunchException("InsufficientInstanceCapacity", "no spot capacity", None) if failed else None
        tracker.update_node_availability(node_type, int(time.time()), error)
    return tracker


def launches(config: dict, demand: list[dict], scorer, tracker=None, existing=None) -> dict[str, int]:
    """What Ray's v1 scheduler adds for `demand` with `scorer` (resource_demand_scheduler.get_nodes_for)."""
    summary = (tracker or NodeProviderAvailabilityTracker()).summary()
    head = config["head_node_type"]
    to_add, _ = get_nodes_for(
        config["available_node_types"],
        {head: 1, **(existing or {})},
        head,
        config["max_workers"],
        demand,
        functools.partial(scorer, node_availability_summary=summary),
    )
    return dict(to_add)


def test_spot_is_chosen_and_its_on_demand_twin_held_back(cluster, spot_fallback):
    scorer = spot_fallback.utilization_scorer
    assert launches(cluster, CPU_WORK, scorer) == {"cpu_worker_spot": 2}
    assert launches(cluster, GPU_WORK, scorer) == {"gpu_worker_spot": 2}
    # The spot type full, the on-demand one adds nothing: the cap of the kind holds.
    assert launches(cluster, GPU_WORK, scorer, existing={"gpu_worker_spot": 2}) == {}
    # A recent successful spot launch changes nothing.
    assert launches(cluster, CPU_WORK, scorer, tracker_after({"cpu_worker_spot": False})) == {"cpu_worker_spot": 2}


def test_a_failed_spot_launch_turns_the_kind_to_on_demand(cluster, spot_fallback):
    scorer = spot_fallback.utilization_scorer
    tracker = tracker_after({"cpu_worker_spot": True})
    assert launches(cluster, CPU_WORK, scorer, tracker) == {"cpu_worker": 2}
    assert launches(cluster, GPU_WORK, scorer, tracker) == {"gpu_worker_spot": 2}  # the other kind stays spot
    # Both failed: spot is tried again first.
    both = tracker_after({"gpu_worker_spot": True, "gpu_worker": True})
    assert launches(cluster, GPU_WORK, scorer, both) == {"gpu_worker_spot": 2}


def test_the_record_of_a_failure_expires(cluster, spot_fallback):
    tracker = tracker_after({"cpu_worker_spot": True})
    tracker.timer = lambda: time.time() + AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S + 1
    assert launches(cluster, CPU_WORK, spot_fallback.utilization_scorer, tracker) == {"cpu_worker_spot": 2}


def test_rays_default_scorer_ignores_failed_launches(cluster):
    """Why the configs need spot_fallback.py: with Ray 2.60's own scorer a spot type that keeps
    failing is chosen again (equal scores, ties broken by the type's name) and its twin never."""
    tracker = tracker_after({"cpu_worker_spot": True})
    assert launches(cluster, CPU_WORK, _default_utilization_scorer, tracker) == {"cpu_worker_spot": 2}


def test_without_the_config_file_no_type_is_held_back(spot_fallback, monkeypatch, tmp_path):
    config = prepare_config(yaml.safe_load((CLUSTER / "aws.yaml").read_text()))
    monkeypatch.setattr(spot_fallback, "BOOTSTRAP_CONFIG", str(tmp_path / "missing.yaml"))
    scorer = spot_fallback.utilization_scorer
    assert launches(config, GPU_WORK, scorer, existing={"gpu_worker_spot": 2}) == {"gpu_worker": 2}


class RaisingProvider:
    """A node provider whose launches fail the way `create_node` raises."""

    def __init__(self, create_node):
        self.create_node = create_node

    def create_node_with_resources_and_labels(self, node_config, tags, count, resources, labels):
        return self.create_node(self, node_config, tags, count)


def launch_once(create_node, node_type: str = "gpu_worker_spot") -> NodeProviderAvailabilityTracker:
    """One launch through Ray's own launcher (node_launcher.py, BaseNodeLauncher); its tracker."""
    config = prepare_config(yaml.safe_load((CLUSTER / "aws.yaml").read_text()))
    tracker, pending = NodeProviderAvailabilityTracker(), ConcurrentCounter()
    pending.inc(node_type, 1)
    launcher = BaseNodeLauncher(RaisingProvider(create_node), pending, EventSummarizer(), tracker)
    launcher.launch_node(config, 1, node_type)
    return tracker


def test_an_aws_launch_failure_reaches_the_record():
    def create_node(self, node_config, tags, count):  # what aws/node_provider.py raises
        raise NodeLaunchException("InsufficientInstanceCapacity", "There is no Spot capacity", None)

    record = launch_once(create_node).summary().node_availabilities["gpu_worker_spot"]
    assert not record.is_available and record.unavailable_node_information.category == "InsufficientInstanceCapacity"


def test_a_gcp_launch_failure_reaches_the_record_only_when_reported(spot_fallback):
    def create_node(self, node_config, tags, count):  # what gcp/node.py wait_for_operation raises
        raise Exception({"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": "no capacity"}]})

    assert launch_once(create_node).summary().node_availabilities == {}  # Ray 2.60 as it is
    reporting = spot_fallback.reporting_launch_failures(create_node)
    assert spot_fallback.reporting_launch_failures(reporting) is reporting  # wrapped once
    record = launch_once(reporting).summary().node_availabilities["gpu_worker_spot"]
    assert not record.is_available and record.unavailable_node_information.category == "ZONE_RESOURCE_POOL_EXHAUSTED"


def test_gcp_provider_is_wrapped_where_it_can_be_imported(spot_fallback):
    try:
        from ray.autoscaler._private.gcp.node_provider import GCPNodeProvider
    except ImportError:  # no google-api-python-client here: the wrapper is a no-op, as on an AWS head
        assert spot_fallback.report_gcp_launch_failures() is False
    else:
        assert spot_fallback.report_gcp_launch_failures() is True
        assert GCPNodeProvider.create_node.reports_launch_failures


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_the_heads_autoscaler_loads_the_scorer(name, spot_fallback, monkeypatch):
    """The head's `ray start` names the scorer the way Ray loads it (resource_demand_scheduler.py)
    and puts cluster/ (synced to ~/albert-ray) on the path."""
    config = yaml.safe_load((CLUSTER / name).read_text())
    (start,) = [c for c in config["head_start_ray_commands"] if "ray start" in c]
    env = ray_start_env(start)
    assert config["file_mounts"]["~/albert-ray"] == "." and env["PYTHONPATH"] == "$HOME/albert-ray/cluster"
    monkeypatch.syspath_prepend(str(CLUSTER))
    assert load_function_or_class(env[AUTOSCALER_UTILIZATION_SCORER_KEY]) is spot_fallback.utilization_scorer
    assert spot_fallback.SPOT == SPOT_SUFFIX
