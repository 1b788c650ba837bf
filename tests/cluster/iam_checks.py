"""The AWS IAM policies of cluster/aws-iam/: what each may grant, as pure functions over parsed JSON."""

from __future__ import annotations

# What Ray's AWS node provider calls from the head's autoscaler with this config
# (ray/autoscaler/_private/aws/node_provider.py: non_terminated_nodes and _get_node ->
# DescribeInstances, _create_node -> RunInstances with TagSpecifications, set_node_tags ->
# CreateTags, terminate_node(s) -> TerminateInstances). StartInstances/StopInstances are called only
# with cache_stopped_nodes (false here), DescribeImages only with a CloudWatch config (none here).
RAY_AWS_HEAD_EC2_ACTIONS = {"ec2:DescribeInstances", "ec2:RunInstances", "ec2:CreateTags", "ec2:TerminateInstances"}
# EC2 actions that support no resource-level permissions and so need Resource "*".
EC2_WITHOUT_RESOURCE_LEVEL = {"ec2:DescribeInstances"}
S3_OBJECT_ACTIONS = {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}


def _listed(value) -> list:
    return value if isinstance(value, list) else [value]


def iam_policy_gaps(
    policy: dict, bucket: str, ec2_actions: set[str] = frozenset(), pass_role: str | None = None
) -> list[str]:
    """Where an IAM policy grants more than: s3:ListBucket on `bucket`, Get/Put/DeleteObject on its
    objects, the `ec2_actions` (Resource "*" only for those that cannot be narrowed, every other EC2
    ARN pinned to a region and an account), and iam:PassRole on `pass_role` alone."""
    gaps = []
    for i, statement in enumerate(policy["Statement"]):
        if statement.get("Effect") != "Allow":
            continue
        if "NotAction" in statement or "NotResource" in statement:
            gaps.append(f"statement {i}: NotAction/NotResource")
            continue
        actions, resources = _listed(statement["Action"]), _listed(statement["Resource"])
        for action in actions:
            service = action.split(":", 1)[0]
            if "*" in action:
                gaps.append(f"statement {i}: wildcard action {action}")
            elif action == "s3:ListBucket":
                if resources != [f"arn:aws:s3:::{bucket}"]:
                    gaps.append(f"statement {i}: {action} beyond the bucket: {resources}")
            elif action in S3_OBJECT_ACTIONS:
                if resources != [f"arn:aws:s3:::{bucket}/*"]:
                    gaps.append(f"statement {i}: {action} beyond the bucket's objects: {resources}")
            elif action == "iam:PassRole":
                if pass_role is None or resources != [pass_role]:
                    gaps.append(f"statement {i}: iam:PassRole on {resources}")
            elif service == "ec2" and action in ec2_actions:
                for resource in resources:
                    if resource == "*":
                        if action not in EC2_WITHOUT_RESOURCE_LEVEL:
                            gaps.append(f"statement {i}: {action} on every resource")
                    elif "*" in ":".join(resource.split(":")[:5]):
                        gaps.append(f"statement {i}: {action} on {resource} (any region or account)")
            else:
                gaps.append(f"statement {i}: {action} is not needed")
    return gaps


def ec2_cluster_tag_gaps(policy: dict, cluster_name: str, tag: str = "ray-cluster-name") -> list[str]:
    """EC2 grants on instances that are not tied to this cluster's tag (Ray tags every instance it
    launches with ray-cluster-name): RunInstances must set it, TerminateInstances and CreateTags on
    existing instances must find it (CreateTags is otherwise allowed only inside RunInstances)."""
    gaps = []
    for i, statement in enumerate(policy["Statement"]):
        on_instances = (
            any(":instance/" in r for r in _listed(statement.get("Resource", []))) or statement.get("Resource") == "*"
        )
        conditions = statement.get("Condition", {}).get("StringEquals", {})
        for action in _listed(statement.get("Action", [])):
            if action not in ("ec2:RunInstances", "ec2:TerminateInstances", "ec2:CreateTags") or not on_instances:
                continue
            if action == "ec2:RunInstances":
                ok = conditions.get(f"aws:RequestTag/{tag}") == cluster_name
            elif action == "ec2:CreateTags" and conditions.get("ec2:CreateAction") == "RunInstances":
                ok = True
            else:
                ok = conditions.get(f"aws:ResourceTag/{tag}") == cluster_name
            if not ok:
                gaps.append(f"statement {i}: {action} on instances not tagged {tag}={cluster_name}")
    return gaps
