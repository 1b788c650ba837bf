"""Ray's fake multi-node provider with nodes that behave more like machines.

- Each node has a temp folder of its own. The stock provider starts every node with the head's,
  so all "nodes" share one runtime-environment folder, and a node's agent deleting an unused
  working directory pulls it from under another node's workers (their working directory
  vanished: FileNotFoundError from os.getcwd inside Ray Tune). Here each node gets
  `<head temp>/n<node number>`.
- A node whose raylet died is gone from the provider's list, as a cloud no longer lists a
  machine that vanished (a reclaimed spot instance). The stock provider keeps listing it, so the
  autoscaler counts it as a pending node that will satisfy the demand, and never replaces it.
- No node starts while the file named by `launch_gate` (provider config) exists: the cloud has no
  capacity for a while (spot), so a fleet that lost a node comes back smaller before it regrows.
  The stock provider starts a node in ~3 s, faster than the cluster notices a lost one, so a
  replacement was there before anything ran on fewer nodes, which no cloud does.

The autoscaler's monitor loads this class (provider type `external`) with the repository on its
PYTHONPATH.
"""

from __future__ import annotations

import os
import time
from unittest import mock

import ray._private.node
from ray._private.ray_constants import PROCESS_TYPE_RAYLET
from ray.autoscaler._private.fake_multi_node.node_provider import FakeMultiNodeProvider

NODE_ID_ENV = "RAY_OVERRIDE_NODE_ID_FOR_TESTING"  # the fake provider names each node through it


class IsolatedFakeProvider(FakeMultiNodeProvider):
    def _create_node_with_resources_and_labels(self, node_config, tags, count, resources, labels):
        node = ray._private.node.Node
        root = self.provider_config["temp_dir"]

        def node_with_own_temp(params, **kwargs):
            params.temp_dir = os.path.join(root, "n" + params.env_vars[NODE_ID_ENV][-5:])
            return node(params, **kwargs)

        gate = self.provider_config.get("launch_gate")
        while gate and os.path.exists(gate):  # on a launcher thread: the autoscaler's updates go on
            time.sleep(0.5)
        with mock.patch.object(ray._private.node, "Node", node_with_own_temp):
            super()._create_node_with_resources_and_labels(node_config, tags, count, resources, labels)

    def non_terminated_nodes(self, tag_filters):
        with self.lock:
            for node_id, spec in list(self._nodes.items()):
                node = spec.get("node")  # None for the head, which this provider does not start
                if node is not None and all(
                    info.process.poll() is not None for info in node.all_processes.get(PROCESS_TYPE_RAYLET, [])
                ):
                    del self._nodes[node_id]
        return super().non_terminated_nodes(tag_filters)
