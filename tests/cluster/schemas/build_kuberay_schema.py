"""Regenerates kuberay-v1.7.0.schema.json: KubeRay's ray.io/v1 RayCluster and RayJob fields plus
the Kubernetes types they embed and the NetworkPolicy kind, without descriptions. Provenance:
README.md beside this file.

    python tests/cluster/schemas/build_kuberay_schema.py PATH/TO/v1.34.0-local-strict/_definitions.json
"""

import json
import sys
from pathlib import Path

K8S = "io.k8s.api.core.v1."
OUT = Path(__file__).with_name("kuberay-v1.7.0.schema.json")


def ref(name: str) -> dict:
    return {"$ref": f"#/$defs/{name}"}


def obj(**properties) -> dict:
    return {"type": "object", "additionalProperties": False, "properties": properties}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


def enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


STR, INT, BOOL, NUM = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "number"}
STR_MAP = {"type": "object", "additionalProperties": STR}
POLICY = enum("DeleteCluster", "DeleteWorkers", "DeleteSelf", "DeleteNone")

# Transcribed field by field from KubeRay v1.7.0 docs/reference/api.md (generated from the CRD Go
# types by crd-ref-docs). `status` is left out: it is written by the operator, never by a manifest.
KUBERAY = {
    "RayCluster": obj(
        apiVersion={"const": "ray.io/v1"},
        kind={"const": "RayCluster"},
        metadata=ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        spec=ref("RayClusterSpec"),
    ),
    "RayJob": obj(
        apiVersion={"const": "ray.io/v1"},
        kind={"const": "RayJob"},
        metadata=ref("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
        spec=ref("RayJobSpec"),
    ),
    "RayClusterSpec": obj(
        upgradeStrategy=obj(type=enum("Recreate", "None")),
        authOptions=ref("AuthOptions"),
        suspend=BOOL,
        managedBy=STR,
        autoscalerOptions=ref("AutoscalerOptions"),
        headServiceAnnotations=STR_MAP,
        enableInTreeAutoscaling=BOOL,
        gcsFaultToleranceOptions=ref("GcsFaultToleranceOptions"),
        historyServerOptions=obj(
            collectorOptions=obj(
                image=STR,
                imagePullPolicy=STR,
                resources=ref(K8S + "ResourceRequirements"),
                env=arr(ref(K8S + "EnvVar")),
            )
        ),
        networkPolicy=ref("NetworkPolicyConfig"),
        tlsOptions=obj(enabled=BOOL),
        headGroupSpec=ref("HeadGroupSpec"),
        rayVersion=STR,
        workerGroupSpecs=arr(ref("WorkerGroupSpec")),
    ),
    "AuthOptions": obj(enableK8sTokenAuth=BOOL, secretName=STR, mode=enum("disabled", "token")),
    "AutoscalerOptions": obj(
        resources=ref(K8S + "ResourceRequirements"),
        image=STR,
        imagePullPolicy=STR,
        securityContext=ref(K8S + "SecurityContext"),
        idleTimeoutSeconds=INT,
        upscalingMode=enum("Default", "Aggressive", "Conservative"),
        version=enum("v1", "v2"),
        env=arr(ref(K8S + "EnvVar")),
        envFrom=arr(ref(K8S + "EnvFromSource")),
        volumeMounts=arr(ref(K8S + "VolumeMount")),
        command=arr(STR),
        args=arr(STR),
    ),
    "GcsFaultToleranceOptions": obj(
        backend=enum("redis", "rocksdb"),
        redisUsername=ref("RedisCredential"),
        redisPassword=ref("RedisCredential"),
        externalStorageNamespace=STR,
        redisAddress=STR,
        storage=obj(
            claimName=STR,
            size=ref("io.k8s.apimachinery.pkg.api.resource.Quantity"),
            storageClassName=STR,
            accessModes=arr(STR),
            subPath=STR,
            deletionPolicy=enum("DeleteWithCluster", "Retain"),
        ),
    ),
    "RedisCredential": obj(valueFrom=ref(K8S + "EnvVarSource"), value=STR),
    "NetworkPolicyConfig": obj(
        mode=enum("DenyAll", "DenyAllIngress", "DenyAllEgress"),
        head=ref("NetworkPolicyRules"),
        worker=ref("NetworkPolicyRules"),
        workerGroups=arr(
            obj(
                groupName=STR,
                ingressRules=arr(ref("io.k8s.api.networking.v1.NetworkPolicyIngressRule")),
                egressRules=arr(ref("io.k8s.api.networking.v1.NetworkPolicyEgressRule")),
            )
        ),
    ),
    "NetworkPolicyRules": obj(
        ingressRules=arr(ref("io.k8s.api.networking.v1.NetworkPolicyIngressRule")),
        egressRules=arr(ref("io.k8s.api.networking.v1.NetworkPolicyEgressRule")),
    ),
    "HeadGroupSpec": obj(
        template=ref(K8S + "PodTemplateSpec"),
        headService=ref(K8S + "Service"),
        enableIngress=BOOL,
        ingressOptions=obj(
            host=STR,
            path=STR,
            pathType=enum("Exact", "Prefix", "ImplementationSpecific"),
            tls=arr(ref("io.k8s.api.networking.v1.IngressTLS")),
        ),
        resources=STR_MAP,
        labels=STR_MAP,
        rayStartParams=STR_MAP,
        serviceType=STR,
    ),
    "WorkerGroupSpec": obj(
        suspend=BOOL,
        groupName=STR,
        replicas=INT,
        minReplicas=INT,
        maxReplicas=INT,
        idleTimeoutSeconds=INT,
        priority=INT,
        resources=STR_MAP,
        labels=STR_MAP,
        rayStartParams=STR_MAP,
        template=ref(K8S + "PodTemplateSpec"),
        scaleStrategy=obj(workersToDelete=arr(STR)),
        numOfHosts=INT,
    ),
    "RayJobSpec": obj(
        activeDeadlineSeconds=INT,
        backoffLimit=INT,
        rayClusterSpec=ref("RayClusterSpec"),
        submitterPodTemplate=ref(K8S + "PodTemplateSpec"),
        metadata=STR_MAP,
        clusterSelector=STR_MAP,
        submitterConfig=obj(backoffLimit=INT),
        managedBy=STR,
        deletionStrategy=obj(
            onSuccess=obj(policy=POLICY),
            onFailure=obj(policy=POLICY),
            deletionRules=arr(obj(policy=POLICY, condition=obj(ttlSeconds=INT))),
        ),
        entrypoint=STR,
        runtimeEnvYAML=STR,
        jobId=STR,
        submissionMode=enum("K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"),
        entrypointResources=STR,
        entrypointNumCpus=NUM,
        entrypointNumGpus=NUM,
        ttlSecondsAfterFinished=INT,
        preRunningDeadlineSeconds=INT,
        shutdownAfterJobFinishes=BOOL,
        suspend=BOOL,
    ),
}
# Plain Kubernetes kinds the manifests also hold (the NetworkPolicy beside each cluster), by kind.
KUBERAY["NetworkPolicy"] = ref("io.k8s.api.networking.v1.NetworkPolicy")
for name in ("RayClusterSpec", "HeadGroupSpec", "WorkerGroupSpec"):
    KUBERAY[name]["required"] = {
        "RayClusterSpec": ["headGroupSpec"],
        "HeadGroupSpec": ["template"],
        "WorkerGroupSpec": ["groupName", "template"],
    }[name]


def strip(node):
    if isinstance(node, dict):
        return {k: strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node):
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"].rsplit("/", 1)[1]
        for v in node.values():
            yield from refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from refs(v)


def main(definitions_path: str) -> None:
    k8s = json.loads(Path(definitions_path).read_text())["$defs"]
    defs = dict(KUBERAY)
    todo = [r for r in refs(KUBERAY) if r not in defs]
    while todo:
        name = todo.pop()
        if name not in defs:
            defs[name] = strip(k8s[name])
            todo.extend(r for r in refs(defs[name]) if r not in defs)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": "Generated by build_kuberay_schema.py; provenance in README.md beside it.",
        "$defs": dict(sorted(defs.items())),
    }
    OUT.write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")
    print(f"{OUT}: {len(defs)} definitions, {OUT.stat().st_size} bytes")


if __name__ == "__main__":
    main(sys.argv[1])
