"""Spot first, on-demand only as the fallback: a node-type scorer for Ray's v1 autoscaler.

The heads in aws.yaml and gcp.yaml start Ray with
``PYTHONPATH=$HOME/albert-ray/cluster RAY_AUTOSCALER_UTILIZATION_SCORER=spot_fallback.utilization_scorer``,
so the autoscaler imports this file and ranks the node types that fit a demand with
`utilization_scorer` instead of Ray's `_default_utilization_scorer`
(ray/autoscaler/_private/resource_demand_scheduler.py, Ray 2.60). Ray's scorer ranks by resources
alone: it is handed the record of failed launches (`node_availability_summary`, kept by
ray/autoscaler/_private/node_provider_availability_tracker.py) but does not read it, so a spot type
whose launches fail would be picked again on every update and its on-demand twin never.

Here, for a node type ``<kind>_spot`` and its on-demand twin ``<kind>`` (same resources):

- ``<kind>_spot`` scores as with Ray's scorer, ahead of any type with an equal score;
- ``<kind>`` is not launched while ``<kind>_spot`` has no failed launch on record. While it has one
  (AUTOSCALER_NODE_AVAILABILITY_MAX_STALENESS_S after the failed attempt, 30 min by default, or
  until a ``<kind>_spot`` launch succeeds) it is, ahead of the spot type. So the on-demand type is
  a fallback, never extra capacity beyond the spot type's max_workers;
- any other type scores as with Ray's scorer.

The scorer is not told which node types exist, so it reads the config the head's autoscaler reads
(`BOOTSTRAP_CONFIG`, written there by `ray up`); without that file no type is held back.

A failed launch reaches the record only as a `NodeLaunchException`. Ray's AWS provider raises one
once RunInstances has failed in every subnet (ray/autoscaler/_private/aws/node_provider.py,
`_create_node`); its GCP provider raises a bare exception (ray/autoscaler/_private/gcp/node.py,
`wait_for_operation`), so importing this file also makes `GCPNodeProvider.create_node` report its
failures the AWS way (`report_gcp_launch_failures`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable

import yaml
from ray.autoscaler._private.node_provider_availability_tracker import NodeAvailabilitySummary
from ray.autoscaler._private.resource_demand_scheduler import _default_utilization_scorer
from ray.autoscaler.node_launch_exception import NodeLaunchException

SPOT = "_spot"
BOOTSTRAP_CONFIG = "~/ray_bootstrap_config.yaml"  # ray/autoscaler/_private/commands.py puts it there


@functools.lru_cache(maxsize=4)
def _node_types_of(path: str, mtime_ns: int) -> frozenset[str]:
    with open(path) as f:
        return frozenset(yaml.safe_load(f).get("available_node_types", {}))


def cluster_node_types() -> frozenset[str]:
    """The node types in the autoscaler's config file (re-read when it changes); none without it."""
    path = os.path.expanduser(BOOTSTRAP_CONFIG)
    try:
        return _node_types_of(path, os.stat(path).st_mtime_ns)
    except OSError:
        return frozenset()


def _failed(summary: NodeAvailabilitySummary, node_type: str) -> bool:
    record = summary.node_availabilities.get(node_type)
    return record is not None and not record.is_available


def utilization_scorer(
    node_resources: dict,
    resources: list[dict],
    node_type: str,
    *,
    node_availability_summary: NodeAvailabilitySummary,
) -> tuple | None:
    """Ray's score with two keys added: launchable (no failed launch on record) right after Ray's
    first key (GPU nodes only for GPU work), and spot as the last (the tie-break); None: not now."""
    score = _default_utilization_scorer(
        node_resources, resources, node_type, node_availability_summary=node_availability_summary
    )
    if score is None:
        return None
    spot, twin = node_type.endswith(SPOT), node_type + SPOT
    if not spot and twin in cluster_node_types() and not _failed(node_availability_summary, twin):
        return None
    return (score[0], not _failed(node_availability_summary, node_type), *score[1:], spot)


def _category(error: Exception) -> str:
    """The first error code of a failed GCE operation (e.g. ZONE_RESOURCE_POOL_EXHAUSTED), else the type."""
    detail = error.args[0] if error.args else None
    if isinstance(detail, dict) and detail.get("errors"):
        return str(detail["errors"][0].get("code", type(error).__name__))
    return type(error).__name__


def reporting_launch_failures(create_node: Callable) -> Callable:
    """`create_node` raising every failure as a NodeLaunchException, which the launcher records."""
    if getattr(create_node, "reports_launch_failures", False):
        return create_node

    @functools.wraps(create_node)
    def wrapped(self, base_config: dict, tags: dict, count: int):
        try:
            return create_node(self, base_config, tags, count)
        except NodeLaunchException:
            raise
        except Exception as error:
            raise NodeLaunchException(_category(error), str(error), sys.exc_info()) from error

    wrapped.reports_launch_failures = True
    return wrapped


def report_gcp_launch_failures() -> bool:
    """Wrap GCPNodeProvider.create_node (once); False where Ray's GCP provider cannot be imported
    (no google-api-python-client: not a GCP head)."""
    try:
        from ray.autoscaler._private.gcp.node_provider import GCPNodeProvider
    except ImportError:
        return False
    GCPNodeProvider.create_node = reporting_launch_failures(GCPNodeProvider.create_node)
    return True


report_gcp_launch_failures()
