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
