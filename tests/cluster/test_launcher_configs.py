"""cluster/aws.yaml and cluster/gcp.yaml: Ray's own schema and validation, scaling, install, security."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import ray.autoscaler
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

from .checks import (
    auth_disabled,
    aws_node_hardening_gaps,
    credential_findings,
    dashboard_not_on_loopback,
    gcp_list_valued_scheduling,
    gcp_service_account_gaps,
    launcher_gpu_types_not_from_zero,
    public_ray_port_rules,
    ray_start_env,
    spot_fallback_gaps,
)

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


@pytest.mark.parametrize("path", [("idle_timeout_minute",), ("available_node_types", "gpu_worker_spot", "min_worker")])
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


@pytest.mark.parametrize("node_type", ["gpu_worker_spot", "gpu_worker"])
def test_gpu_rule_catches_a_warm_gpu_pool(config, node_type):
    broken = copy.deepcopy(config)
    broken["available_node_types"][node_type]["min_workers"] = 1
    assert launcher_gpu_types_not_from_zero(broken) == [node_type]


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
    assert len(starts) == 2 and all(ray_start_env(c)["RAY_AUTH_MODE"] == "token" for c in starts)
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


def test_dashboard_listens_on_the_heads_loopback_only(config):
    """`ray dashboard` tunnels localhost:8265 to the head's localhost:8265 (ssh -L ...:localhost:...,
    ray/autoscaler/_private/command_runner.py), so 127.0.0.1 is all the dashboard needs."""
    assert dashboard_not_on_loopback(config) == []


@pytest.mark.parametrize("host", ["--dashboard-host=0.0.0.0", ""])
def test_dashboard_rule_catches_a_dashboard_on_every_interface(config, host):
    broken = copy.deepcopy(config)
    broken["head_start_ray_commands"][1] = broken["head_start_ray_commands"][1].replace(
        "--dashboard-host=127.0.0.1", host
    )
    assert len(dashboard_not_on_loopback(broken)) == 1


def test_spot_first_with_an_on_demand_twin_per_kind(config):
    assert spot_fallback_gaps(config) == []
    names = {n for n in config["available_node_types"] if n != config["head_node_type"]}
    assert names == {"cpu_worker_spot", "cpu_worker", "gpu_worker_spot", "gpu_worker"}


@pytest.mark.parametrize(
    "change, gap",
    [
        (lambda types: types.pop("gpu_worker"), "gpu_worker has no on-demand type"),
        (lambda types: types.pop("cpu_worker_spot"), "cpu_worker has no spot type"),
        (lambda types: types["cpu_worker"]["resources"].update(CPU=16), "cpu_worker: resources differ"),
        (lambda types: types["cpu_worker_spot"].update(max_workers=4), "cpu_worker: max_workers differ"),
        (lambda types: types["gpu_worker"]["node_config"].update(Disk=1), "gpu_worker: node configs differ"),
    ],
)
def test_spot_rule_catches_a_broken_pair(config, change, gap):
    broken = copy.deepcopy(config)
    change(broken["available_node_types"])
    assert any(gap in g for g in spot_fallback_gaps(broken)), spot_fallback_gaps(broken)


def test_spot_rule_catches_market_options_that_do_not_match_the_names(config):
    broken = copy.deepcopy(config)
    types = broken["available_node_types"]
    types["cpu_worker_spot"]["node_config"], types["cpu_worker"]["node_config"] = (
        types["cpu_worker"]["node_config"],
        types["cpu_worker_spot"]["node_config"],
    )
    assert spot_fallback_gaps(broken) == ["cpu_worker: market options do not match the names"]


def test_spot_rule_catches_a_cluster_cap_out_of_step(config):
    broken = copy.deepcopy(config)
    broken["max_workers"] = 20
    assert spot_fallback_gaps(broken) == ["max_workers 20 != the kinds' caps 10"]


def test_aws_every_node_has_its_own_profile_and_requires_imdsv2():
    config = load("aws.yaml")
    assert aws_node_hardening_gaps(config) == []
    profiles = {n: t["node_config"]["IamInstanceProfile"]["Name"] for n, t in config["available_node_types"].items()}
    assert profiles.pop("head") == "albert-ray-head" and set(profiles.values()) == {"albert-ray-worker"}
    hops = {
        t["node_config"]["MetadataOptions"]["HttpPutResponseHopLimit"] for t in config["available_node_types"].values()
    }
    assert hops == {1}  # Ray runs on the host; no container here
    markets = [
        t["node_config"]["InstanceMarketOptions"] for n, t in config["available_node_types"].items() if "spot" in n
    ]
    assert markets and all(m["SpotOptions"]["InstanceInterruptionBehavior"] == "terminate" for m in markets)


@pytest.mark.parametrize(
    "node_type, change, gap",
    [
        ("head", lambda c: c.pop("IamInstanceProfile"), "head: no IamInstanceProfile"),
        ("cpu_worker_spot", lambda c: c["MetadataOptions"].update(HttpTokens="optional"), "IMDSv2 not required"),
        ("gpu_worker", lambda c: c.pop("MetadataOptions"), "IMDSv2 not required"),
        ("head", lambda c: c["MetadataOptions"].update(HttpPutResponseHopLimit=3), "hop limit 3"),
    ],
)
def test_aws_hardening_rule_catches_a_broken_node(node_type, change, gap):
    broken = load("aws.yaml")
    change(broken["available_node_types"][node_type]["node_config"])
    jsonschema.validate(broken, RAY_SCHEMA)
    assert any(gap in g for g in aws_node_hardening_gaps(broken)), aws_node_hardening_gaps(broken)


def test_gcp_nodes_run_as_minimal_service_accounts_and_schedule_as_objects():
    config = load("gcp.yaml")
    assert gcp_service_account_gaps(config) == []
    assert gcp_list_valued_scheduling(config) == []
    accounts = {n: t["node_config"]["serviceAccounts"][0] for n, t in config["available_node_types"].items()}
    project = config["provider"]["project_id"]
    assert accounts.pop("head") == {
        "email": f"albert-ray-head@{project}.iam.gserviceaccount.com",
        "scopes": ["https://www.googleapis.com/auth/compute"],
    }
    assert {a["email"] for a in accounts.values()} == {f"albert-ray-worker@{project}.iam.gserviceaccount.com"}
    assert {s for a in accounts.values() for s in a["scopes"]} == {
        "https://www.googleapis.com/auth/devstorage.read_only"
    }


@pytest.mark.parametrize(
    "node_type, account, gap",
    [
        ("cpu_worker_spot", None, "0 service accounts"),
        (
            "head",
            {
                "email": "albert-ray-head@p.iam.gserviceaccount.com",
                "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
            },
            "broad scopes",
        ),
        (
            "gpu_worker_spot",
            {"email": "123-compute@developer.gserviceaccount.com", "scopes": []},
            "default service account",
        ),
        (
            "gpu_worker",
            {"email": "ray-autoscaler-sa-v1@p.iam.gserviceaccount.com", "scopes": []},
            "Ray's default",
        ),
        (
            "cpu_worker",
            {"email": "albert-ray-head@your-gcp-project-id.iam.gserviceaccount.com", "scopes": []},
            "share the head's",
        ),
        (
            "cpu_worker",
            {
                "email": "albert-ray-worker@p.iam.gserviceaccount.com",
                "scopes": ["https://www.googleapis.com/auth/compute"],
            },
            "broad scopes",
        ),
    ],
)
def test_gcp_service_account_rule_catches_a_broad_account(node_type, account, gap):
    broken = load("gcp.yaml")
    node_config = broken["available_node_types"][node_type]["node_config"]
    node_config["serviceAccounts"] = [account] if account else []
    assert any(gap in g for g in gcp_service_account_gaps(broken)), gcp_service_account_gaps(broken)


def test_gcp_scheduling_rule_catches_the_list_form_of_rays_examples():
    broken = load("gcp.yaml")
    broken["available_node_types"]["gpu_worker"]["node_config"]["scheduling"] = [{"onHostMaintenance": "TERMINATE"}]
    jsonschema.validate(broken, RAY_SCHEMA)  # Ray's schema and validation accept it; the Compute API does not
    validate_config(prepare_config(copy.deepcopy(broken)))
    assert gcp_list_valued_scheduling(broken) == ["gpu_worker"]
