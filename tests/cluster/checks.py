"""Security and scaling rules for cluster/: pure functions over parsed configs, shared by the tests."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator
from typing import Any

# GCS, dashboard + jobs API, Ray client.
RAY_PORTS = (6379, 8265, 10001)
PUBLIC_SERVICE_TYPES = {"LoadBalancer", "NodePort"}

CREDENTIAL_PATTERNS = {
    "AWS access key id": re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"),
    "AWS secret key setting": re.compile(r"aws_secret_access_key|AWS_SECRET_ACCESS_KEY", re.I),
    "AWS session token setting": re.compile(r"aws_session_token", re.I),
    "private key block": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "GCP service account key": re.compile(r'"type"\s*:\s*"service_account"|private_key_id'),
    "inline Ray token": re.compile(r"RAY_AUTH_TOKEN\s*[=:]\s*\S|name:\s*RAY_AUTH_TOKEN\s*\n\s*value:"),
    "launcher credentials field": re.compile(r"^\s*(gcp_credentials|ssh_private_key)\s*:", re.M),
    "password": re.compile(r"password\s*[=:]\s*\S", re.I),
}


def credential_findings(text: str) -> list[str]:
    """Names of the credential patterns found in a file's text."""
    return [name for name, pattern in CREDENTIAL_PATTERNS.items() if pattern.search(text)]


def walk(node: Any) -> Iterator[dict]:
    """Every mapping inside a parsed YAML document, the document included."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def _is_internet(cidr: str) -> bool:
    return ipaddress.ip_network(cidr, strict=False).prefixlen == 0


def _covers_ray_port(low: int, high: int) -> bool:
    return any(low <= port <= high for port in RAY_PORTS)


def public_ray_port_rules(config: dict) -> list[dict]:
    """AWS IpPermissions and GCP firewall-shaped rules that open a Ray port to the whole internet."""
    found = []
    for node in walk(config):
        for rule in node.get("IpPermissions", []) if isinstance(node.get("IpPermissions"), list) else []:
            cidrs = [r.get("CidrIp", "") for r in rule.get("IpRanges", [])]
            cidrs += [r.get("CidrIpv6", "") for r in rule.get("Ipv6Ranges", [])]
            everything = str(rule.get("IpProtocol")) == "-1"
            low, high = rule.get("FromPort", 0), rule.get("ToPort", 65535)
            if any(c and _is_internet(c) for c in cidrs) and (everything or _covers_ray_port(low, high)):
                found.append(rule)
        if "sourceRanges" in node and any(_is_internet(c) for c in node["sourceRanges"]):
            for allowed in node.get("allowed", []):
                ports = allowed.get("ports") or ["0-65535"]
                spans = [tuple(int(p) for p in (span.split("-") * 2)[:2]) for span in map(str, ports)]
                if allowed.get("IPProtocol") in ("all", "tcp") and any(_covers_ray_port(*s) for s in spans):
                    found.append(node)
    return found


def launcher_gpu_types_not_from_zero(config: dict) -> list[str]:
    """Launcher node types that provide GPUs but keep min_workers above 0."""
    return [
        name
        for name, node in config["available_node_types"].items()
        if name != config["head_node_type"]
        and node.get("resources", {}).get("GPU", 0) > 0
        and node.get("min_workers", 0) != 0
    ]


def pod_gpus(template: dict) -> int:
    containers = template.get("spec", {}).get("containers", [])
    return sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0)) for c in containers)


def kuberay_gpu_groups_not_from_zero(cluster_spec: dict) -> list[str]:
    """KubeRay worker groups with GPUs whose minReplicas (or initial replicas) is not 0."""
    return [
        g["groupName"]
        for g in cluster_spec.get("workerGroupSpecs", [])
        if pod_gpus(g["template"]) > 0 and (g.get("minReplicas", 0) != 0 or g.get("replicas", 0) != 0)
    ]


def kuberay_exposures(doc: dict) -> list[str]:
    """Ways a KubeRay manifest could publish Ray's ports beyond the cluster network."""
    found = []
    if doc.get("kind") == "Service" and doc.get("spec", {}).get("type") in PUBLIC_SERVICE_TYPES:
        found.append(f"Service {doc['metadata']['name']} of type {doc['spec']['type']}")
    for node in walk(doc):
        if node.get("serviceType") in PUBLIC_SERVICE_TYPES:
            found.append(f"serviceType {node['serviceType']}")
        if (
            isinstance(node.get("headService"), dict)
            and node["headService"].get("spec", {}).get("type") in PUBLIC_SERVICE_TYPES
        ):
            found.append("headService of a public type")
        if node.get("enableIngress") is True:
            found.append("enableIngress")
        if node.get("hostNetwork") is True:
            found.append("hostNetwork")
        if "hostPort" in node:
            found.append(f"hostPort {node['hostPort']}")
    return found


def auth_disabled(text: str) -> bool:
    """True if a file turns Ray's token authentication off."""
    return bool(re.search(r"RAY_AUTH_MODE\W+disabled|mode:\s*disabled", text))


def dashboard_not_on_loopback(config: dict) -> list[str]:
    """Head `ray start` commands whose dashboard (and jobs API) is not bound to 127.0.0.1 alone."""
    return [
        command
        for command in config["head_start_ray_commands"]
        if "ray start" in command and "--dashboard-host=127.0.0.1" not in command.split()
    ]


# Launcher node types for spot with on-demand fallback, as cluster/spot_fallback.py names them:
# `<kind>_spot` and its on-demand twin `<kind>`.
SPOT_SUFFIX = "_spot"


def is_spot(node_config: dict) -> bool:
    """An AWS spot or GCP spot/preemptible node config."""
    market = node_config.get("InstanceMarketOptions", {}).get("MarketType")
    scheduling = node_config.get("scheduling", {})
    scheduling = scheduling if isinstance(scheduling, dict) else {}
    return market == "spot" or scheduling.get("provisioningModel") == "SPOT" or scheduling.get("preemptible") is True


def _without_market(node_config: dict) -> dict:
    return {k: v for k, v in node_config.items() if k not in ("InstanceMarketOptions", "scheduling")}


def spot_fallback_gaps(config: dict) -> list[str]:
    """What breaks `<kind>_spot` first, `<kind>` on demand as its fallback: every worker kind has
    both; `<kind>_spot` is spot and `<kind>` is not; the two have the same resources, limits and
    machine (market options aside); the cluster's max_workers is the sum of the kinds' caps."""
    types = {n: t for n, t in config["available_node_types"].items() if n != config["head_node_type"]}
    kinds = {n.removesuffix(SPOT_SUFFIX) for n in types}
    gaps = []
    for kind in sorted(kinds):
        spot, on_demand = types.get(kind + SPOT_SUFFIX), types.get(kind)
        if spot is None or on_demand is None:
            gaps.append(f"{kind} has no {'spot' if spot is None else 'on-demand'} type")
            continue
        if not is_spot(spot["node_config"]) or is_spot(on_demand["node_config"]):
            gaps.append(f"{kind}: market options do not match the names")
        for key in ("resources", "min_workers", "max_workers"):
            if spot.get(key) != on_demand.get(key):
                gaps.append(f"{kind}: {key} differ")
        if _without_market(spot["node_config"]) != _without_market(on_demand["node_config"]):
            gaps.append(f"{kind}: node configs differ beyond the market options")
    caps = sum(types[kind]["max_workers"] for kind in kinds if kind in types)
    if config["max_workers"] != caps:
        gaps.append(f"max_workers {config['max_workers']} != the kinds' caps {caps}")
    return gaps


def gcp_list_valued_scheduling(config: dict) -> list[str]:
    """GCP node types whose `scheduling` is a list (the Compute API takes one object; ray#46248)."""
    return [
        n for n, t in config["available_node_types"].items() if isinstance(t["node_config"].get("scheduling"), list)
    ]


def aws_node_hardening_gaps(config: dict) -> list[str]:
    """AWS node types without an explicit instance profile (the head would get Ray's default role,
    EC2 and S3 full access) or without IMDSv2 required (hop limit 1 or 2: the host, or a container)."""
    gaps = []
    for name, node_type in config["available_node_types"].items():
        node_config = node_type["node_config"]
        profile = node_config.get("IamInstanceProfile", {})
        if not (profile.get("Name") or profile.get("Arn")):
            gaps.append(f"{name}: no IamInstanceProfile")
        metadata = node_config.get("MetadataOptions", {})
        if metadata.get("HttpTokens") != "required":
            gaps.append(f"{name}: IMDSv2 not required")
        if metadata.get("HttpPutResponseHopLimit") not in (1, 2):
            gaps.append(f"{name}: IMDS hop limit {metadata.get('HttpPutResponseHopLimit')} (want 1 or 2)")
    return gaps


GCP_BROAD_SCOPES = {"https://www.googleapis.com/auth/cloud-platform", "https://www.googleapis.com/auth/compute"}


def gcp_service_account_gaps(config: dict) -> list[str]:
    """GCP node types not running as their own account: none named, Compute Engine's default account
    or Ray's (ray-autoscaler-sa-v1, compute.admin and storage.objectAdmin), the cloud-platform
    scope anywhere, the compute scope on a worker, or the head sharing its account with workers."""
    gaps, head = [], config["head_node_type"]
    emails = {}
    for name, node_type in config["available_node_types"].items():
        accounts = node_type["node_config"].get("serviceAccounts", [])
        if len(accounts) != 1:
            gaps.append(f"{name}: {len(accounts)} service accounts")
            continue
        (account,) = accounts
        email, scopes = account.get("email", ""), set(account.get("scopes", []))
        emails[name] = email
        if email == "default" or email.endswith("-compute@developer.gserviceaccount.com"):
            gaps.append(f"{name}: Compute Engine's default service account")
        if email.startswith("ray-autoscaler-sa-"):
            gaps.append(f"{name}: Ray's default service account")
        # The head needs the Compute Engine scope to launch workers; no node needs cloud-platform.
        allowed = {"https://www.googleapis.com/auth/compute"} if name == head else set()
        if broad := scopes & (GCP_BROAD_SCOPES - allowed):
            gaps.append(f"{name}: broad scopes {sorted(broad)}")
    if head in emails and any(e == emails[head] for n, e in emails.items() if n != head):
        gaps.append("workers share the head's service account")
    return gaps


# --- KubeRay ---

DASHBOARD_PORT = 8265
# Labels KubeRay v1.7 puts on every pod of every cluster (ray-operator/controllers/ray/common/pod.go,
# labelPod), so they name no particular cluster.
KUBERAY_GENERIC_LABELS = {
    "ray.io/is-ray-node",
    "ray.io/node-type",
    "ray.io/group",
    "app.kubernetes.io/name",
    "app.kubernetes.io/created-by",
}


def _cluster_spec(doc: dict) -> dict:
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def kuberay_pod_labels(doc: dict) -> dict[str, dict]:
    """The labels each group's pods get from KubeRay v1.7 (labelPod): KubeRay's own, then the
    template's (which may not replace ray.io/node-type, group or cluster). A RayJob's cluster has a
    generated name (`<job>-<5 random>`), so its ray.io/cluster value is unknown here and left out."""
    spec = _cluster_spec(doc)
    groups = [("headgroup", "head", spec["headGroupSpec"])]
    groups += [(g["groupName"], "worker", g) for g in spec.get("workerGroupSpecs", [])]
    labels = {}
    for group, node_type, group_spec in groups:
        own = {
            "ray.io/is-ray-node": "yes",
            "ray.io/node-type": node_type,
            "ray.io/group": group,
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator",
        }
        if doc["kind"] == "RayCluster":
            own["ray.io/cluster"] = doc["metadata"]["name"]
        template = group_spec["template"].get("metadata", {}).get("labels", {})
        fixed = ("ray.io/node-type", "ray.io/group", "ray.io/cluster")
        labels[group] = {**own, **{k: v for k, v in template.items() if k not in fixed}}
    return labels


def _selects(selector: dict, labels: dict) -> bool:
    """A LabelSelector of matchLabels (matchExpressions, unused here, count as selecting nothing)."""
    if selector.get("matchExpressions"):
        return False
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def network_policy_gaps(policy: dict, cluster: dict) -> list[str]:
    """Where a NetworkPolicy fails to admit to a KubeRay cluster's pods only: the cluster's own pods
    (any port, as Ray needs), and other pods named by labels (in a namespace named by labels) on the
    dashboard port alone."""
    spec = policy["spec"]
    selector = spec.get("podSelector", {})
    own_peer = {"podSelector": selector}
    gaps = [
        f"pods of group {g} not selected"
        for g, labels in kuberay_pod_labels(cluster).items()
        if not _selects(selector, labels)
    ]
    if not set(selector.get("matchLabels", {})) - KUBERAY_GENERIC_LABELS:
        gaps.append("podSelector names no particular cluster")
    if "Ingress" not in spec.get("policyTypes", []):
        gaps.append("policyTypes lacks Ingress")
    if not any(own_peer in rule.get("from", []) and not rule.get("ports") for rule in spec.get("ingress", [])):
        gaps.append("the cluster's own pods are not admitted on every port")
    for i, rule in enumerate(spec.get("ingress", [])):
        if not rule.get("from"):
            gaps.append(f"ingress[{i}] admits every source")
            continue
        others = [peer for peer in rule["from"] if peer != own_peer]
        for peer in others:
            if set(peer) - {"podSelector", "namespaceSelector"} or not peer.get("podSelector", {}).get("matchLabels"):
                gaps.append(f"ingress[{i}] admits more than pods named by labels: {peer}")
            elif "namespaceSelector" in peer and not peer["namespaceSelector"].get("matchLabels"):
                gaps.append(f"ingress[{i}] admits such pods in every namespace")
        ports = [(p.get("protocol", "TCP"), p.get("port")) for p in rule.get("ports", [])]
        if others and set(ports) != {("TCP", DASHBOARD_PORT)}:
            gaps.append(f"ingress[{i}] admits other pods to {ports or 'every port'}, not the dashboard's alone")
    return gaps


def ray_client_ports(doc: dict) -> list[int]:
    """Container ports that publish the Ray Client server (10001, or named `client`)."""
    return [
        node["containerPort"]
        for node in walk(doc)
        if "containerPort" in node and (node["containerPort"] == 10001 or node.get("name") == "client")
    ]


def ray_start_env(command: str) -> dict[str, str]:
    """The VAR=value assignments in front of `ray start` in a launcher command line."""
    (segment,) = [s for s in command.split(";") if "ray start" in s]
    env = {}
    for token in segment.split():
        if token == "ray":
            break
        name, _, value = token.partition("=")
        env[name] = value
    return env
