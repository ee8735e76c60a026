"""Review (k8snodes): a fleet spec (adapters/kubernetes/fleetspec.py ``load_fleet_spec``) whose entries clash or
carry fields the compiler does not read. The promise: errors name the entry and field, and the file, before
anything is applied; ``gpufleet k8s quotas --apply`` creates or replaces each object it compiles, so two objects of
one name mean the first is silently replaced by the second."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.adapters.kubernetes.fleetspec import load_fleet_spec
from gpufleet.domain.errors import ValidationError

H100 = "NVIDIA-H100-80GB-HBM3"


def _refused(tmp_path: Path, text: str) -> ValidationError:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text)
    with pytest.raises(ValidationError) as err:
        objs = load_fleet_spec(spec)
        names = [(o["kind"], o["metadata"]["name"]) for o in objs]
        pytest.fail(f"compiled {names}")
    assert err.value.location == str(spec)
    return err.value


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (H100, H100),  # the same (SKU, tier) twice, with other GPUs
        ("NVIDIA-H100-80GB", "NVIDIA-H100_80GB"),  # two products, one name once lower-cased and cleaned
        ("NVIDIA-H100", "nvidia-h100"),
    ],
)
def test_two_tiers_that_compile_to_one_nodepool_are_refused(tmp_path: Path, first: str, second: str) -> None:
    """Review (fixed), the defect: flavor_name lower-cases a product and turns what is not [a-z0-9-] into '-', so two
    tier entries of one (SKU, tier), or of two products that differ only there, compile into two ResourceFlavors and
    two NodePools of one name. ``k8s quotas --apply`` creates the first and replaces it with the second: a reserved
    NodePool limited to 64 GPUs bought silently becomes one of 8, or the first product's NodePool becomes the
    second's (its nodes' product pin changed: the first product cannot be launched at all). It must be refused,
    naming the second entry's sku."""
    err = _refused(
        tmp_path,
        f"tiers:\n  - {{sku: {first}, tier: reserved, gpus: 64}}\n  - {{sku: {second}, tier: reserved, gpus: 8}}\n",
    )
    assert err.field == "tiers[1].sku"


def test_an_unknown_tier_names_its_entry(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``tier: ondemand`` in the second of several tiers is refused as field ``tier`` (the
    compiler's check), not ``tiers[1].tier``: in a spec of dozens of tiers and quotas the operator is not told
    which."""
    err = _refused(
        tmp_path,
        f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64}}\n  - {{sku: {H100}, tier: ondemand, gpus: 8}}\n",
    )
    assert err.field == "tiers[1].tier"
    err = _refused(
        tmp_path,
        f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64}}\n"
        f"quotas:\n  - {{team: a, cohort: ml, sku: {H100}, tier: spot-ish, nominal_gpus: 8}}\n",
    )
    assert err.field == "quotas[0].tier"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        # a typo of instance_families: the NodePool launches p5 instead of p4d
        (
            f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64, instance_family: [p4d]}}\n",
            "tiers[0].instance_family",
        ),
        # a typo of borrowing_limit_gpus: the team may borrow without limit
        (
            f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64}}\nquotas:\n"
            f"  - {{team: a, cohort: ml, sku: {H100}, tier: reserved, nominal_gpus: 8, borrowing_limit: 0}}\n",
            "quotas[0].borrowing_limit",
        ),
        # a typo of tiers: no NodePool at all
        (f"tier:\n  - {{sku: {H100}, tier: reserved, gpus: 64}}\n", "tier"),
    ],
)
def test_a_field_the_spec_does_not_know_is_refused(tmp_path: Path, text: str, field: str) -> None:
    """Review (fixed), the defect: load_fleet_spec reads the keys it knows and ignores the rest, so a misspelt optional
    field changes what is applied without a word: ``instance_family: [p4d]`` leaves the default p5,
    ``borrowing_limit: 0`` (for ``borrowing_limit_gpus``) lets the team borrow the whole cohort, ``tier:`` (for
    ``tiers:``) applies no NodePool. An unknown field must be refused, named."""
    assert _refused(tmp_path, text).field == field


def test_a_teams_quota_of_one_flavor_twice_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: two quota entries of one team and one (SKU, tier) compile into a ClusterQueue whose
    resource group lists the flavor twice (nominal 32 and 8). The API server refuses it at apply time (422, the
    CRD's flavors are a list-map keyed by name: "Duplicate value", seen on the v1.20 fixture), after the
    ResourceFlavor and the Cohort were applied and before the NodePool: a half-applied spec. Refused up front,
    named."""
    err = _refused(
        tmp_path,
        f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64}}\nquotas:\n"
        f"  - {{team: a, cohort: ml, sku: {H100}, tier: reserved, nominal_gpus: 32}}\n"
        f"  - {{team: a, cohort: ml, sku: {H100}, tier: reserved, nominal_gpus: 8}}\n",
    )
    assert err.field == "quotas[1]"


def test_no_instance_family_is_refused(tmp_path: Path) -> None:
    """Review (fixed), the defect: ``instance_families: []`` passed (every name of an empty list is a name) and
    compiled a NodePool requirement ``karpenter.k8s.aws/instance-family In []``, which Karpenter v1's CRD refuses
    ("requirements with operator 'In' must have a value defined", a CEL rule the v1.20 fixture does not run but a
    current API server does, checked offline with tests/integration/k8s/crdcheck.py): the spec was refused halfway
    through ``--apply``, after the Kueue objects. Refused up front, named."""
    err = _refused(tmp_path, f"tiers:\n  - {{sku: {H100}, tier: reserved, gpus: 64, instance_families: []}}\n")
    assert err.field == "tiers[0].instance_families"
