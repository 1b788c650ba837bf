"""cluster/kuberay/: every key checked against KubeRay's and Kubernetes' schemas, scaling, security,
and the NetworkPolicy beside each cluster."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from .checks import (
    auth_disabled,
    kuberay_exposures,
    kuberay_gpu_groups_not_from_zero,
    network_policy_gaps,
    pod_gpus,
    ray_client_ports,
)

KUBERAY = Path(__file__).resolve().parents[2] / "cluster" / "kuberay"
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "kuberay-v1.7.0.schema.json").read_text())
MANIFESTS = ["raycluster.yaml", "rayjob.yaml"]


def load_all(name: str) -> list[dict]:
    return list(yaml.safe_load_all((KUBERAY / name).read_text()))


def load(name: str) -> dict:
    """The KubeRay resource of a manifest (its first document)."""
    return load_all(name)[0]


def load_policy(name: str) -> dict:
    (policy,) = [d for d in load_all(name) if d["kind"] == "NetworkPolicy"]
    return policy


def errors(doc: dict, kind: str | None = None) -> list[str]:
    schema = {**SCHEMA, "$ref": f"#/$defs/{kind or doc['kind']}"}
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
        for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)
    ]


def resolve(node: dict) -> dict:
    while "$ref" in node:
        node = SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def key_paths(doc, node, path=()):
    """(path, kind) of every mapping key in `doc`, kind 'field' when the schema names the allowed
    keys (closed object) and 'map' when the key is free (rayStartParams, labels, resource names)."""
    node = resolve(node)
    if isinstance(doc, dict):
        fields = node.get("properties")
        for key, value in doc.items():
            if fields is not None:
                assert node.get("additionalProperties") is False, f"open object at {path}"
                yield path + (key,), "field"
                if key in fields:
                    yield from key_paths(value, fields[key], path + (key,))
            else:
                yield path + (key,), "map"
                yield from key_paths(value, node.get("additionalProperties", {}), path + (key,))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from key_paths(value, node.get("items", {}), path + (i,))


@pytest.fixture(params=MANIFESTS)
def doc(request) -> dict:
    return load(request.param)


def test_each_manifest_is_its_cluster_and_a_network_policy():
    assert [[d["kind"] for d in load_all(name)] for name in MANIFESTS] == [
        ["RayCluster", "NetworkPolicy"],
        ["RayJob", "NetworkPolicy"],
    ]


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifest_validates_against_the_vendored_schema(name):
    for doc in load_all(name):
        assert errors(doc) == []


# The keys the schema leaves free (map entries), per manifest: Ray start parameters, resource
# names, and pod labels (the RayJob's pods carry one for its NetworkPolicy; the policies select by labels).
FREE_KEYS = {
    "raycluster.yaml": {"num-cpus", "cpu", "memory", "nvidia.com/gpu", "ray.io/cluster"},
    "rayjob.yaml": {
        "num-cpus",
        "cpu",
        "memory",
        "nvidia.com/gpu",
        "app.kubernetes.io/instance",
        "ray.io/originated-from-crd",
        "ray.io/originated-from-cr-name",
        "kubernetes.io/metadata.name",
        "app.kubernetes.io/name",
    },
}


@pytest.mark.parametrize("name", MANIFESTS)
def test_every_key_is_checked_by_name(name):
    """Renaming any field key, anywhere in the manifest, must make validation fail; the only keys
    the schema leaves free are map entries, and those are exactly the expected ones."""
    free, fields_seen = set(), 0
    for doc in load_all(name):
        paths = list(key_paths(doc, SCHEMA["$defs"][doc["kind"]]))
        fields = [p for p, kind in paths if kind == "field"]
        fields_seen += len(fields)
        for path in fields:
            broken = copy.deepcopy(doc)
            parent = broken
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1] + "x"] = parent.pop(path[-1])
            assert errors(broken, doc["kind"]), f"renaming {'/'.join(map(str, path))} went unnoticed"
        free |= {p[-1] for p, kind in paths if kind == "map"}
    assert fields_seen > 60
    assert free == FREE_KEYS[name]


def test_a_misspelled_key_fails(doc):
    spec = doc["spec"].get("rayClusterSpec", doc["spec"])
    spec["workerGroupSpecs"][1]["minReplica"] = spec["workerGroupSpecs"][1].pop("minReplicas")
    spec["headGroupSpec"]["template"]["spec"]["containers"][0]["resorces"] = {}
    found = errors(doc)
    assert any("minReplica'" in e for e in found) and any("resorces" in e for e in found)


def cluster_spec(doc: dict) -> dict:
    return doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]


def test_autoscaling_cpu_and_gpu_groups_gpu_from_zero(doc):
    spec = cluster_spec(doc)
    assert spec["enableInTreeAutoscaling"] is True
    groups = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert pod_gpus(groups["gpu"]["template"]) > 0 and pod_gpus(groups["cpu"]["template"]) == 0
    assert all(g["maxReplicas"] > g["minReplicas"] for g in groups.values())
    assert kuberay_gpu_groups_not_from_zero(spec) == []
    groups["gpu"]["minReplicas"] = 1
    assert kuberay_gpu_groups_not_from_zero(spec) == ["gpu"]


def test_token_auth_on_and_nothing_public(doc):
    assert cluster_spec(doc)["authOptions"] == {"mode": "token"}
    assert not auth_disabled((KUBERAY / f"{doc['kind'].lower()}.yaml").read_text())
    assert kuberay_exposures(doc) == []


@pytest.mark.parametrize("change", ["serviceType", "headService", "ingress", "service", "hostPort"])
def test_exposure_rule_catches_a_public_endpoint(change):
    doc = load("raycluster.yaml")
    head = doc["spec"]["headGroupSpec"]
    if change == "serviceType":
        head["serviceType"] = "LoadBalancer"
    elif change == "headService":
        head["headService"] = {"spec": {"type": "NodePort"}}
    elif change == "ingress":
        head["enableIngress"] = True
    elif change == "hostPort":
        head["template"]["spec"]["containers"][0]["ports"][1]["hostPort"] = 8265
    if change != "service":
        assert errors(doc) == []  # a manifest the API server would accept
    else:
        doc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "albert-ray-dashboard"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 8265}]},
        }
    assert kuberay_exposures(doc)


def test_rayjob_runs_the_pipeline():
    spec = load("rayjob.yaml")["spec"]
    assert spec["entrypoint"].startswith("python pipelines/full_run.py --config configs/base-paper.yaml")
    assert spec["shutdownAfterJobFinishes"] is True


def test_no_ray_client_port_is_declared(doc):
    """The pipeline submits through the jobs API (8265) and never uses Ray Client (10001)."""
    assert ray_client_ports(doc) == []
    head = cluster_spec(doc)["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in head["ports"]} == {"gcs-server": 6379, "dashboard": 8265}


def test_client_port_rule_catches_the_client_port(doc):
    head = cluster_spec(doc)["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"].append({"containerPort": 10001, "name": "client"})
    assert ray_client_ports(doc) == [10001]


@pytest.mark.parametrize("name", MANIFESTS)
def test_network_policy_admits_only_the_clusters_pods_and_the_jobs_drivers(name):
    assert network_policy_gaps(load_policy(name), load(name)) == []


def test_rayjob_policy_admits_the_submitter_and_the_operator_to_the_dashboard_only():
    (own, drivers) = load_policy("rayjob.yaml")["spec"]["ingress"]
    assert "ports" not in own
    assert drivers["ports"] == [{"protocol": "TCP", "port": 8265}]
    labels = [peer["podSelector"]["matchLabels"] for peer in drivers["from"]]
    # The submitter Job's pod (rayjob_controller.go, getSubmitterTemplate) and the operator (Helm chart)
    assert labels == [
        {"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "albert-full-run"},
        {"app.kubernetes.io/name": "kuberay-operator"},
    ]


def test_raycluster_policy_admits_its_own_pods_alone():
    assert load_policy("raycluster.yaml")["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": "albert-ray"}}}]}
    ]


def _unlabel_gpu_group(policy: dict, cluster: dict) -> None:
    cluster_spec(cluster)["workerGroupSpecs"][1]["template"].pop("metadata")


def _select_the_head_only(policy: dict, cluster: dict) -> None:
    policy["spec"]["podSelector"]["matchLabels"]["ray.io/node-type"] = "head"


def _select_every_ray_pod(policy: dict, cluster: dict) -> None:
    policy["spec"]["podSelector"] = {"matchLabels": {"ray.io/is-ray-node": "yes"}}


def _open_to_everyone(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"].append({"ports": [{"port": 6379}]})


def _open_to_an_address_range(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"].append({"from": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]})


def _open_gcs_to_other_pods(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"].append(
        {"from": [{"podSelector": {"matchLabels": {"app": "other"}}}], "ports": [{"port": 6379}]}
    )


def _open_every_port_to_other_pods(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"].append({"from": [{"podSelector": {"matchLabels": {"app": "other"}}}]})


def _admit_every_namespace(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"].append(
        {
            "from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "x"}}}],
            "ports": [{"protocol": "TCP", "port": 8265}],
        }
    )


def _drop_ingress_type(policy: dict, cluster: dict) -> None:
    policy["spec"]["policyTypes"] = ["Egress"]


def _restrict_own_pods_to_the_dashboard(policy: dict, cluster: dict) -> None:
    policy["spec"]["ingress"][0]["ports"] = [{"protocol": "TCP", "port": 8265}]


@pytest.mark.parametrize(
    "name, change, gap",
    [
        ("rayjob.yaml", _unlabel_gpu_group, "pods of group gpu not selected"),
        ("raycluster.yaml", _select_the_head_only, "pods of group cpu not selected"),
        ("raycluster.yaml", _select_every_ray_pod, "names no particular cluster"),
        ("raycluster.yaml", _open_to_everyone, "admits every source"),
        ("rayjob.yaml", _open_to_an_address_range, "more than pods named by labels"),
        ("rayjob.yaml", _open_gcs_to_other_pods, "not the dashboard's alone"),
        ("raycluster.yaml", _open_every_port_to_other_pods, "every port"),
        ("rayjob.yaml", _admit_every_namespace, "in every namespace"),
        ("raycluster.yaml", _drop_ingress_type, "lacks Ingress"),
        ("rayjob.yaml", _restrict_own_pods_to_the_dashboard, "own pods are not admitted on every port"),
    ],
)
def test_network_policy_rule_catches_a_broken_policy(name, change, gap):
    policy, cluster = load_policy(name), load(name)
    change(policy, cluster)
    assert errors(policy) == [] and errors(cluster) == []  # manifests the API server would accept
    assert any(gap in g for g in network_policy_gaps(policy, cluster)), network_policy_gaps(policy, cluster)
