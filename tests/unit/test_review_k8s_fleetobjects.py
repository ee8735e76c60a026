"""Review: names of the Kueue and Karpenter objects compiled from a fleet spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.fleetobjects import TierCapacity, flavor_name, karpenter_objects, kueue_objects
from gpufleet.adapters.kubernetes.fleetspec import load_fleet_spec
from gpufleet.domain.errors import ValidationError

# a valid nvidia.com/gpu.product label value (label values may be up to 63 characters)
LONG_PRODUCT = "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-me-all-balanced-profile-x1234"


def test_long_products_keep_one_flavor_and_one_nodepool_per_tier() -> None:
    """Review (fixed), the defect: flavor_name cuts ``<sku>-<tier>`` to 63 characters (fleetobjects.py flavor_name),
    which for a product of 61-63 characters (still a valid label value) cuts the tier off: reserved, spot and on-demand
    get the SAME ResourceFlavor and NodePool name. kueue_objects/karpenter_objects then emit three objects with one
    name; apply_object replaces the reserved NodePool (limit: the GPUs bought) with the on-demand one (another limit, no
    reserved capacity-type requirement), silently. Distinct (SKU, tier) pairs must get distinct, valid names (or a clear
    error naming the sku)."""
    assert len(LONG_PRODUCT) <= 63
    names = {flavor_name(LONG_PRODUCT, t) for t in ("reserved", "spot", "on-demand")}
    assert len(names) == 3, f"three tiers share names: {names}"
    tiers = [TierCapacity(LONG_PRODUCT, t, g) for t, g in (("reserved", 64), ("spot", 32), ("on-demand", 16))]
    pools = karpenter_objects(tiers)
    assert len({p["metadata"]["name"] for p in pools}) == 3
    flavors = [o for o in kueue_objects([], tiers, {}) if o["kind"] == "ResourceFlavor"]
    assert len({f["metadata"]["name"] for f in flavors}) == 3


def test_a_team_name_that_is_no_valid_object_name_is_refused_naming_the_field(tmp_path: Path) -> None:
    """Review (fixed), the defect: load_fleet_spec / kueue_objects put the team (and cohort) verbatim into
    ClusterQueue/Cohort metadata.name without checking it is a DNS-1123 name. ``team: ML Research`` compiles into an
    object the API server refuses (422); ``gpufleet k8s quotas --apply`` has by then already created the
    ResourceFlavors, the Cohort and the NodePools, and creates a LocalQueue pointing at a ClusterQueue that does not
    exist: a half applied fleet spec instead of a clear error naming quotas[0].team before anything is sent."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        "tiers:\n"
        "  - {sku: NVIDIA-H100-80GB-HBM3, tier: reserved, gpus: 64}\n"
        "quotas:\n"
        "  - {team: ML Research, cohort: ml, sku: NVIDIA-H100-80GB-HBM3, tier: reserved, nominal_gpus: 32}\n"
        "namespaces: {research-jobs: ML Research}\n"
    )
    with pytest.raises(ValidationError) as err:
        objs = load_fleet_spec(spec)
        bad = [o["metadata"]["name"] for o in objs if o["kind"] == "ClusterQueue"]
        pytest.fail(f"compiled objects with invalid names: {bad}")
    assert "quotas[0].team" in str(err.value.field)
