"""cluster/aws-iam/: the roles the AWS nodes run as, narrowed to the run's bucket and, for the head,
to the EC2 calls Ray's autoscaler makes for this cluster's instances; the GCP roles in the README."""

import copy
import inspect
import json
import re
from pathlib import Path

import pytest
import ray.autoscaler._private.aws.node_provider as aws_node_provider
import yaml

from .iam_checks import RAY_AWS_HEAD_EC2_ACTIONS, ec2_cluster_tag_gaps, iam_policy_gaps

CLUSTER = Path(__file__).resolve().parents[2] / "cluster"
IAM = CLUSTER / "aws-iam"
BUCKET = "YOUR-BUCKET"  # the placeholder the README's commands replace
WORKER_ROLE = "arn:aws:iam::ACCOUNT_ID:role/albert-ray-worker"
AWS = yaml.safe_load((CLUSTER / "aws.yaml").read_text())


def policy(name: str) -> dict:
    return json.loads((IAM / f"{name}-policy.json").read_text())


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def actions(policy: dict) -> set[str]:
    return {a for s in policy["Statement"] for a in _listed(s["Action"])}


def test_worker_role_reaches_the_runs_bucket_and_nothing_else():
    worker = policy("worker")
    assert iam_policy_gaps(worker, BUCKET) == []
    assert actions(worker) == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}


def test_head_role_adds_only_the_autoscalers_ec2_calls_and_passing_the_worker_role():
    head = policy("head")
    assert iam_policy_gaps(head, BUCKET, RAY_AWS_HEAD_EC2_ACTIONS, WORKER_ROLE) == []
    assert actions(head) == actions(policy("worker")) | RAY_AWS_HEAD_EC2_ACTIONS | {"iam:PassRole"}
    assert head["Statement"][:2] == policy("worker")["Statement"]  # the job driver on the head writes run_dir too


def test_head_role_acts_only_on_instances_tagged_for_this_cluster():
    head = policy("head")
    assert ec2_cluster_tag_gaps(head, AWS["cluster_name"]) == []
    ec2_arns = [r for s in head["Statement"] for r in _listed(s["Resource"]) if r.startswith("arn:aws:ec2")]
    assert {r.split(":")[3] for r in ec2_arns} == {AWS["provider"]["region"]}


def test_roles_match_the_launcher_configs_profiles_and_trust_ec2_alone():
    profiles = {t["node_config"]["IamInstanceProfile"]["Name"] for t in AWS["available_node_types"].values()}
    assert profiles == {"albert-ray-head", "albert-ray-worker"}
    assert WORKER_ROLE.rsplit("/", 1)[1] == "albert-ray-worker"
    trust = json.loads((IAM / "trust-policy.json").read_text())
    assert [(s["Effect"], s["Principal"], s["Action"]) for s in trust["Statement"]] == [
        ("Allow", {"Service": "ec2.amazonaws.com"}, "sts:AssumeRole")
    ]


@pytest.mark.parametrize(
    "statement, gap",
    [
        ({"Effect": "Allow", "Action": "s3:*", "Resource": "*"}, "wildcard action s3:*"),
        ({"Effect": "Allow", "Action": "ec2:*", "Resource": "*"}, "wildcard action ec2:*"),
        ({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::*"}, "beyond the bucket's objects"),
        ({"Effect": "Allow", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::other"}, "beyond the bucket"),
        ({"Effect": "Allow", "Action": "s3:PutBucketPolicy", "Resource": f"arn:aws:s3:::{BUCKET}"}, "not needed"),
        ({"Effect": "Allow", "Action": "ec2:RunInstances", "Resource": "*"}, "on every resource"),
        (
            {"Effect": "Allow", "Action": "ec2:TerminateInstances", "Resource": "arn:aws:ec2:*:*:instance/*"},
            "any region",
        ),
        ({"Effect": "Allow", "Action": "ec2:StopInstances", "Resource": "*"}, "not needed"),
        ({"Effect": "Allow", "Action": "iam:PassRole", "Resource": "*"}, "iam:PassRole on ['*']"),
        ({"Effect": "Allow", "Action": "iam:CreateRole", "Resource": WORKER_ROLE}, "not needed"),
        ({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}, "NotAction"),
    ],
)
def test_policy_rule_catches_a_broad_grant(statement, gap):
    broken = copy.deepcopy(policy("head"))
    broken["Statement"].append(statement)
    found = iam_policy_gaps(broken, BUCKET, RAY_AWS_HEAD_EC2_ACTIONS, WORKER_ROLE)
    assert any(gap in g for g in found), found


def test_policy_rule_catches_passrole_on_a_worker_policy():
    broken = policy("worker")
    broken["Statement"].append({"Effect": "Allow", "Action": "iam:PassRole", "Resource": WORKER_ROLE})
    assert iam_policy_gaps(broken, BUCKET) == [
        "statement 2: iam:PassRole on ['arn:aws:iam::ACCOUNT_ID:role/albert-ray-worker']"
    ]


@pytest.mark.parametrize(
    "sid", ["LaunchOnlyInstancesTaggedForThisCluster", "RetagAndTerminateOnlyThisClustersInstances"]
)
def test_tag_rule_catches_an_unconditioned_instance_grant(sid):
    broken = policy("head")
    (statement,) = [s for s in broken["Statement"] if s["Sid"] == sid]
    statement.pop("Condition")
    assert ec2_cluster_tag_gaps(broken, AWS["cluster_name"])


def test_the_ec2_calls_in_rays_aws_node_provider_are_the_ones_accounted_for():
    """Every boto3 EC2 call in Ray 2.60's AWS node provider, as IAM actions: the head's policy has the
    four its autoscaler makes here; the rest run only with cache_stopped_nodes (Start/StopInstances),
    a CloudWatch config (DescribeImages) or on the laptop during `ray up` (DescribeInstanceTypes).
    A Ray upgrade that calls something new fails here."""
    source = inspect.getsource(aws_node_provider)
    calls = set(
        re.findall(r"\.(describe_\w+|create_tags|start_instances|stop_instances|terminate_instances)\b", source)
    )
    actions = {"ec2:" + "".join(w.title() for w in c.split("_")) for c in calls}
    if ".create_instances(" in source:
        actions.add("ec2:RunInstances")
    if ".instances.filter(" in source:
        actions.add("ec2:DescribeInstances")
    if ".terminate()" in source:
        actions.add("ec2:TerminateInstances")
    unused_here = {"ec2:StartInstances", "ec2:StopInstances", "ec2:DescribeImages", "ec2:DescribeInstanceTypes"}
    assert actions == RAY_AWS_HEAD_EC2_ACTIONS | unused_here
    assert AWS["provider"]["cache_stopped_nodes"] is False and "cloudwatch" not in AWS["provider"]


def test_readme_grants_the_gcp_accounts_narrow_roles_only():
    readme = (CLUSTER / "README.md").read_text()
    roles = set(re.findall(r"--role=(roles/[\w.]+)", readme))
    assert roles == {"roles/compute.instanceAdmin.v1", "roles/iam.serviceAccountUser"}
