"""Kueue and Karpenter objects compiled from gpufleet's quota and procurement decisions.

Tiers and the chain: the order in which gpufleet's loop places checkpointed training on capacity
(``control/placement.py: running_tier_order``, the order the simulator runs): reserved first, then the cheaper
launched tier, ``reserved -> spot -> on-demand`` for every catalog SKU (spot is the cheaper one). Each (GPU SKU,
tier) is one Kueue ResourceFlavor (node labels ``nvidia.com/gpu.product`` and ``karpenter.sh/capacity-type``) and
one Karpenter NodePool. Spot is for checkpointable work only: its flavor and NodePool carry the taint
``gpufleet.io/spot=true:NoSchedule``, which checkpointable pods tolerate (Kueue assigns a flavor only if
the workload tolerates its taints; Karpenter taints the nodes it launches). So checkpointable work tries spot
before on demand, and work that does not tolerate spot skips it: ``reserved -> on-demand``.

- Kueue (v1beta2): one Cohort per quota cohort; one ClusterQueue per team (``cohortName``; only the team's
  namespaces may submit to it, ``namespaceSelector`` by ``kubernetes.io/metadata.name``; one resource group
  over ``nvidia.com/gpu`` whose flavors are listed in chain order, so Kueue tries reserved first; nominal quota,
  borrowing and lending limits from :class:`~gpufleet.schedule.quota.TeamQuota`, a lending limit above the nominal
  refused as Kueue's webhook refuses it); one LocalQueue per
  namespace pointing at its team's ClusterQueue.
- Karpenter (v1): one NodePool per (SKU, tier) with ``limits`` = the GPUs procurement decided for that tier,
  ``weight`` = chain order (reserved highest), requirements on capacity type and instance families, and the
  template label ``nvidia.com/gpu.product`` (Karpenter then knows its nodes carry the product a Kueue flavor's
  ``nodeLabels`` select, and the controller reads which product the NodePool's ``limits`` bound).
  Where Karpenter can launch nodes, gpufleet does not launch them itself; with ``release: gpufleet`` in the fleet
  spec the launched tiers' NodePools never consolidate (``consolidateAfter: Never``) and the controller releases
  their idle nodes with the loop's node scaler instead (control/node_release.py).

Every object carries the label ``app.kubernetes.io/managed-by: gpufleet``. Pure functions: they return dicts;
:meth:`Actuator.apply_object` sends them (an existing object of the same name without that label is someone else's:
not replaced, unless adopted; an existing one keeps what others put on its metadata).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.adapters.kubernetes.act import MANAGED_BY, MANAGER
from gpufleet.adapters.kubernetes.labels import GPU, L_CAPACITY, L_PRODUCT
from gpufleet.adapters.kubernetes.rest import JSON
from gpufleet.control.placement import running_tier_order
from gpufleet.domain.errors import ValidationError
from gpufleet.domain.pools import SPOT_NODE_TAINT, CapacityPool, Tier
from gpufleet.schedule.quota import TeamQuota

CAPACITY_TYPE = {Tier.RESERVED: "reserved", Tier.ON_DEMAND: "on-demand", Tier.SPOT: "spot"}
CHAIN: tuple[str, ...] = ("reserved", "spot", "on-demand")  # capacity_chain of every catalog SKU (tested)
WEIGHTS = (100, 50, 10)  # NodePool weight by position in the chain


def capacity_chain(prices: Mapping[Tier, Decimal]) -> tuple[str, ...]:
    """The capacity types of one SKU in the order gpufleet places checkpointed training on them, from its prices
    per GPU-hour (``control/placement.py: running_tier_order``; secondary providers are not Karpenter's)."""
    return tuple(CAPACITY_TYPE[t] for t in running_tier_order(True, True, prices) if t in CAPACITY_TYPE)


SPOT_TAINT = dict(zip(("key", "value", "effect"), SPOT_NODE_TAINT, strict=True))
KUEUE = "kueue.x-k8s.io/v1beta2"
KARPENTER = "karpenter.sh/v1"
OWNED = {MANAGED_BY: MANAGER}  # the label of every object emitted here: Actuator.apply_object replaces only those
PATHS = {
    "ResourceFlavor": "/apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "Cohort": "/apis/kueue.x-k8s.io/v1beta2/cohorts",
    "ClusterQueue": "/apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "NodePool": "/apis/karpenter.sh/v1/nodepools",
}


@dataclass(frozen=True, slots=True)
class TierCapacity:
    """What procurement decided for one (SKU, tier): GPUs Karpenter may run, on which instance families."""

    sku: str  # nvidia.com/gpu.product value, e.g. NVIDIA-H100-80GB-HBM3
    tier: str  # reserved | on-demand | spot
    gpus: int | None  # None = no limit (an unbounded on-demand pool)
    instance_families: tuple[str, ...] = ("p5",)
    node_class: str = "gpu"
    chain: tuple[str, ...] = CHAIN  # its SKU's capacity chain (``capacity_chain`` of its prices)

    @property
    def flavor(self) -> str:
        return flavor_name(self.sku, self.tier)


def flavor_name(sku: str, tier: str) -> str:
    """The ResourceFlavor and NodePool name of a (SKU, tier): at most 63 characters, the tier always kept; a SKU too
    long for it is cut and told apart by 6 hex of its SHA-256."""
    base = re.sub(r"[^a-z0-9-]", "-", sku.lower()).strip("-")
    room = 63 - len(tier) - 1
    if len(base) > room:
        base = f"{base[: room - 7].rstrip('-')}-{hashlib.sha256(sku.encode()).hexdigest()[:6]}"
    return f"{base}-{tier}"


def _position(t: TierCapacity) -> int:
    return t.chain.index(t.tier) if t.tier in t.chain else len(t.chain)


def _check_tier(tier: str) -> None:
    if tier not in CHAIN:
        raise ValidationError("tier", f"{tier!r}: choose one of {', '.join(CHAIN)}")


def resource_flavor(sku: str, tier: str) -> JSON:
    _check_tier(tier)
    spec: JSON = {"nodeLabels": {L_PRODUCT: sku, L_CAPACITY: tier}}
    if tier == "spot":
        spec["nodeTaints"] = [dict(SPOT_TAINT)]
    meta = {"name": flavor_name(sku, tier), "labels": dict(OWNED)}
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": meta, "spec": spec}


def kueue_objects(
    quotas: Iterable[TeamQuota], tiers: Iterable[TierCapacity], namespaces: Mapping[str, str]
) -> list[JSON]:
    """ResourceFlavors, Cohorts, ClusterQueues and LocalQueues. ``TeamQuota.flavor`` names a flavor of
    ``tiers`` (``flavor_name(sku, tier)``); ``namespaces`` maps namespace -> team."""
    tiers = list(tiers)
    by_flavor = {t.flavor: t for t in tiers}
    out: list[JSON] = [resource_flavor(t.sku, t.tier) for t in tiers]
    quotas = list(quotas)
    for q in quotas:
        if q.flavor not in by_flavor:
            raise ValidationError(f"quota[{q.team}].flavor", f"{q.flavor!r} is no flavor of the given tiers")
        if q.lending_limit_gpus is not None and q.lending_limit_gpus > q.nominal_gpus:  # Kueue's webhook refuses it
            raise ValidationError(f"quota[{q.team}].lending_limit_gpus",
                                  f"{q.lending_limit_gpus} is above the nominal quota {q.nominal_gpus}: a team lends "
                                  "at most its nominal quota (Kueue refuses lendingLimit > nominalQuota)")  # fmt: skip
    for cohort in sorted({q.cohort for q in quotas}):
        out.append({"apiVersion": KUEUE, "kind": "Cohort", "metadata": {"name": cohort, "labels": dict(OWNED)},
                    "spec": {}})  # fmt: skip
    teams = sorted({q.team for q in quotas})
    for team in teams:
        mine = sorted((q for q in quotas if q.team == team), key=lambda q: _position(by_flavor[q.flavor]))
        cohorts = {q.cohort for q in mine}
        if len(cohorts) != 1:
            raise ValidationError(f"quota[{team}].cohort", "a team belongs to exactly one cohort")
        flavors = []
        for q in mine:
            res: JSON = {"name": GPU, "nominalQuota": q.nominal_gpus}
            if q.borrowing_limit_gpus is not None:
                res["borrowingLimit"] = q.borrowing_limit_gpus
            if q.lending_limit_gpus is not None:
                res["lendingLimit"] = q.lending_limit_gpus
            flavors.append({"name": q.flavor, "resources": [res]})
        out.append({
            "apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": team, "labels": dict(OWNED)},
            "spec": {"cohortName": cohorts.pop(), "namespaceSelector": team_namespaces(team, namespaces),
                     "queueingStrategy": "BestEffortFIFO",
                     "resourceGroups": [{"coveredResources": [GPU], "flavors": flavors}],
                     "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}},
        })  # fmt: skip
    for ns, team in sorted(namespaces.items()):
        if team not in teams:
            raise ValidationError(f"namespaces[{ns}]", f"team {team!r} has no quota")
        out.append({"apiVersion": KUEUE, "kind": "LocalQueue",
                    "metadata": {"name": "gpufleet", "namespace": ns, "labels": dict(OWNED)},
                    "spec": {"clusterQueue": team}})  # fmt: skip
    return out


NAMESPACE_NAME = "kubernetes.io/metadata.name"  # every namespace's own name, set by the API server (1.21+)
NO_NAMESPACE = "gpufleet.no_namespace"  # a valid label value no namespace is named ('.', '_'): selects none


def team_namespaces(team: str, namespaces: Mapping[str, str]) -> JSON:
    """A team's ClusterQueue's ``namespaceSelector``: its namespaces by name (``namespaces``: namespace -> team), so a
    LocalQueue of another namespace cannot draw on the team's quota; none for a team without namespaces (one that
    only lends to its cohort: :data:`NO_NAMESPACE`, on every API server version). By the label ``kubernetes.io/metadata.name`` (the API server sets it from 1.21; on an
    older one the namespaces need it set by hand)."""
    mine = sorted(ns for ns, t in namespaces.items() if t == team) or [NO_NAMESPACE]
    return {"matchExpressions": [{"key": NAMESPACE_NAME, "operator": "In", "values": mine}]}


def node_pool(t: TierCapacity, gpus_per_node: int = 8, consolidate_after: str = "300s") -> JSON:
    _check_tier(t.tier)
    if t.gpus is not None and t.gpus < 0:
        raise ValidationError(f"tiers[{t.flavor}].gpus", "must be >= 0")
    spec: JSON = {
        "weight": WEIGHTS[_position(t)],
        "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": consolidate_after},
        "template": {
            "metadata": {"labels": {"gpufleet.io/tier": t.tier, L_PRODUCT: t.sku}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": t.node_class},
                "requirements": [
                    {"key": L_CAPACITY, "operator": "In", "values": [t.tier]},
                    {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": list(t.instance_families)},
                    {
                        "key": "karpenter.k8s.aws/instance-gpu-count",
                        "operator": "Gt",
                        "values": [str(gpus_per_node - 1)],
                    },
                ],
                "expireAfter": "720h",
            },
        },
    }
    if t.gpus is not None:
        spec["limits"] = {GPU: str(t.gpus)}
    if t.tier == "spot":
        spec["template"]["spec"]["taints"] = [dict(SPOT_TAINT)]
    meta = {"name": t.flavor, "labels": dict(OWNED)}  # whose limits follow procurement (node_limits.py)
    return {"apiVersion": KARPENTER, "kind": "NodePool", "metadata": meta, "spec": spec}


def tiers_from_pools(
    pools: Iterable[CapacityPool],
    reserved_gpus: Mapping[str, int],
    product_of: Mapping[str, str],
    instance_families: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[list[TierCapacity], list[tuple[str, str]]]:
    """Procurement's state as node tiers: reserved = the GPUs procurement committed per SKU
    (``reserved_gpus``), on-demand and spot = the pool's quota (None = unbounded). Secondary (neocloud)
    pools are not launched by Karpenter: returned as skipped ``(pool id, "not_karpenter_launchable")``, as are
    SKUs without a GPU product name (``no_product``)."""
    fams = instance_families or {}
    out: list[TierCapacity] = []
    skipped: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    pools = list(pools)
    prices: dict[str, dict[Tier, Decimal]] = {}
    for p in pools:
        prices.setdefault(p.sku_id, {}).setdefault(p.tier, p.price_usd_per_gpu_h)
    for p in pools:
        tier = CAPACITY_TYPE.get(p.tier)
        if tier is None:
            skipped.append((p.id, "not_karpenter_launchable"))
            continue
        if p.sku_id not in product_of:
            skipped.append((p.id, "no_product"))
            continue
        if (p.sku_id, tier) in seen:
            continue  # one NodePool per (SKU, tier); regions are the node class's business
        seen.add((p.sku_id, tier))
        gpus = reserved_gpus.get(p.sku_id, 0) if tier == "reserved" else p.quota_gpus
        chain = capacity_chain(prices[p.sku_id])
        out.append(TierCapacity(product_of[p.sku_id], tier, gpus, fams.get(p.sku_id, ("p5",)), chain=chain))
    out.sort(key=lambda t: (t.sku, _position(t)))
    return out, skipped


def karpenter_objects(tiers: Iterable[TierCapacity], *, gpufleet_releases: bool = False) -> list[JSON]:
    """One NodePool per tier. ``gpufleet_releases``: the controller releases idle launched nodes with the loop's
    node scaler (``gpufleet controller --release-every-s``), so Karpenter does not empty the launched tiers' nodes
    itself (``consolidateAfter: Never`` on on-demand and spot; reserved keeps Karpenter's WhenEmpty)."""
    return [
        node_pool(t, consolidate_after="Never") if gpufleet_releases and t.tier != "reserved" else node_pool(t)
        for t in tiers
    ]


def collection_path(obj: JSON) -> str:
    if obj["kind"] == "LocalQueue":
        return f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{obj['metadata']['namespace']}/localqueues"
    return PATHS[obj["kind"]]
