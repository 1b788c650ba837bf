"""cluster/kuberay/: every key checked against KubeRay's and Kubernetes' schemas, scaling, security."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from .checks import auth_disabled, kuberay_exposures, kuberay_gpu_groups_not_from_zero, pod_gpus

KUBERAY = Path(__file__).resolve().parents[2] / "cluster" / "kuberay"
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "kuberay-v1.7.0.schema.json").read_text())
MANIFESTS = ["raycluster.yaml", "rayjob.yaml"]


def load(name: str) -> dict:
    (doc,) = yaml.safe_load_all((KUBERAY / name).read_text())
    return doc


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


def test_manifest_validates_against_the_vendored_schema(doc):
    assert errors(doc) == []


def test_every_key_is_checked_by_name(doc):
    """Renaming any field key, anywhere in the manifest, must make validation fail; the only keys
    the schema leaves free are map entries, and those are exactly the expected ones."""
    paths = list(key_paths(doc, SCHEMA["$defs"][doc["kind"]]))
    fields = [p for p, kind in paths if kind == "field"]
    assert len(fields) > 60
    for path in fields:
        broken = copy.deepcopy(doc)
        parent = broken
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1] + "x"] = parent.pop(path[-1])
        assert errors(broken, doc["kind"]), f"renaming {'/'.join(map(str, path))} went unnoticed"
    free = {p[-1] for p, kind in paths if kind == "map"}
    assert free == {"num-cpus", "cpu", "memory", "nvidia.com/gpu"}


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
