"""Review (k8s): which namespaces may submit to a team's ClusterQueue (``fleetobjects.kueue_objects``)."""

from __future__ import annotations

from gpufleet.adapters.kubernetes.fleetobjects import TierCapacity, flavor_name, kueue_objects
from gpufleet.schedule.quota import TeamQuota

H100 = "NVIDIA-H100-80GB-HBM3"


def test_a_teams_cluster_queue_admits_only_the_teams_namespaces() -> None:
    """Review (fixed), the defect: every emitted ClusterQueue had ``namespaceSelector: {}`` (every namespace), so the
    fleet spec's namespace -> team mapping was only the LocalQueue gpufleet created: any namespace whose users may
    create a LocalQueue could point it at another team's ClusterQueue and spend that team's quota. Now each
    ClusterQueue admits its team's namespaces only (by ``kubernetes.io/metadata.name``); a team with none, none."""
    tiers = [TierCapacity(H100, "reserved", 64)]
    quotas = [
        TeamQuota("research", "co", flavor_name(H100, "reserved"), 32),
        TeamQuota("serving", "co", flavor_name(H100, "reserved"), 16),
        TeamQuota("lender", "co", flavor_name(H100, "reserved"), 16),
    ]
    objs = kueue_objects(quotas, tiers, {"ml-b": "research", "ml-a": "research", "web": "serving"})
    sel = {o["metadata"]["name"]: o["spec"]["namespaceSelector"] for o in objs if o["kind"] == "ClusterQueue"}
    name = "kubernetes.io/metadata.name"
    assert sel["research"] == {"matchExpressions": [{"key": name, "operator": "In", "values": ["ml-a", "ml-b"]}]}
    assert sel["serving"] == {"matchExpressions": [{"key": name, "operator": "In", "values": ["web"]}]}
    # a team with no namespace (one that only lends its quota to the cohort) admits none
    assert sel["lender"] == {"matchExpressions": [{"key": name, "operator": "In", "values": ["gpufleet.no_namespace"]}]}
