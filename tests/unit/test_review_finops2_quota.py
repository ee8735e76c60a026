"""Review: team quotas with borrowing (``schedule/quota.py``) and the Kueue objects compiled from them
(``adapters/kubernetes/fleetobjects.py`` / ``fleetspec.py``), against Kueue's v1beta2 ClusterQueue API
(``spec.resourceGroups[].flavors[].resources[].{nominalQuota, borrowingLimit, lendingLimit}``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.kubernetes.fleetobjects import TierCapacity, kueue_objects
from gpufleet.adapters.kubernetes.fleetspec import load_fleet_spec
from gpufleet.domain.errors import ValidationError
from gpufleet.schedule.quota import QuotaBook, TeamQuota

PRODUCT = "NVIDIA-H100-80GB-HBM3"
FLAVOR = "nvidia-h100-80gb-hbm3-reserved"


def test_a_lending_limit_above_the_nominal_quota_is_refused_naming_the_field(tmp_path: Path) -> None:
    """Review (fixed), the defect: the quota model reads a lending limit above the nominal as "all of the nominal"
    (``lendable_gpus = min(lending, nominal)``), and ``fleetspec`` accepts it; ``kueue_objects`` emits it verbatim as
    ``lendingLimit: 40`` over ``nominalQuota: 32``. Kueue's ClusterQueue webhook refuses exactly that ("must be less
    than or equal to the nominalQuota", pkg/webhooks/clusterqueue_webhook.go), so ``gpufleet k8s quotas --apply``
    creates the ResourceFlavors and the Cohort, then fails on the team's ClusterQueue: a half applied fleet spec and
    a LocalQueue pointing at nothing, instead of a clear error naming ``quotas[0].lending_limit_gpus``."""
    spec = tmp_path / "fleet.yaml"
    spec.write_text(
        f"tiers:\n  - {{sku: {PRODUCT}, tier: reserved, gpus: 64}}\n"
        "quotas:\n"
        f"  - {{team: research, cohort: ml, sku: {PRODUCT}, tier: reserved, nominal_gpus: 32, lending_limit_gpus: 40}}\n"
        "namespaces: {research-jobs: research}\n"
    )
    with pytest.raises(ValidationError) as err:
        load_fleet_spec(spec)
    assert err.value.field == "quotas[0].lending_limit_gpus"
    with pytest.raises(ValidationError):  # the compiler itself refuses it too (a caller without the spec reader)
        kueue_objects([TeamQuota("research", "ml", FLAVOR, 32, None, 40)], [TierCapacity(PRODUCT, "reserved", 64)], {})


quotas = st.lists(
    st.tuples(st.integers(0, 16), st.none() | st.integers(0, 16), st.none() | st.integers(0, 16)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=200, deadline=None)
@given(quotas)
def test_the_cluster_queues_carry_the_quota_models_numbers(qs: list[tuple[int, int | None, int | None]]) -> None:
    """Review (holds): every ClusterQueue has the cohort, and per flavor the model's nominal quota, borrowing limit and
    lending limit (absent = unlimited, as in Kueue), for any valid quotas."""
    teams = [TeamQuota(f"t{i}", "ml", FLAVOR, n, b, None if lend is None else min(lend, n))
             for i, (n, b, lend) in enumerate(qs)]  # fmt: skip
    objs = kueue_objects(teams, [TierCapacity(PRODUCT, "reserved", 64)], {})
    cqs = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "ClusterQueue"}
    for q in teams:
        spec = cqs[q.team]
        assert spec["cohortName"] == "ml"
        [group] = spec["resourceGroups"]
        [flavor] = group["flavors"]
        [res] = flavor["resources"]
        assert (flavor["name"], res["name"], res["nominalQuota"]) == (q.flavor, "nvidia.com/gpu", q.nominal_gpus)
        assert res.get("borrowingLimit") == q.borrowing_limit_gpus
        assert res.get("lendingLimit") == q.lending_limit_gpus
        assert res.get("lendingLimit", res["nominalQuota"]) <= res["nominalQuota"]


@settings(max_examples=200, deadline=None)
@given(quotas, st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8), st.booleans()), max_size=30))
def test_borrowing_never_exceeds_the_cohorts_unused_quota_and_is_reclaimed_first(
    qs: list[tuple[int, int | None, int | None]], requests: list[tuple[int, int, bool]]
) -> None:
    """Review (holds): whatever the order of admissions and releases, no team goes above nominal + borrowing limit,
    the cohort never holds more than its members' nominal quotas, a team's guaranteed part (nominal - lending) is
    never lent, and a reclaim plan takes GPUs only from teams above their nominal, never more than they borrowed."""
    book = QuotaBook()
    teams = [TeamQuota(f"t{i}", "ml", FLAVOR, n, b, None if lend is None else min(lend, n))
             for i, (n, b, lend) in enumerate(qs)]  # fmt: skip
    for q in teams:
        book.add(q)
    for who, gpus, release in requests:
        q = teams[who % len(teams)]
        key = (q.team, q.flavor)
        if release:
            book.release(q.team, q.flavor, min(gpus, book.usage[key]))
            continue
        before = dict(book.usage)
        a = book.admit(q.team, q.flavor, gpus)
        for r in a.reclaims:
            rq = book.quotas[(r.team, FLAVOR)]
            assert r.team != q.team and 0 < r.gpus <= before[(r.team, FLAVOR)] - rq.nominal_gpus
        if a.decision == "admit_after_reclaim":
            assert before[key] + gpus <= q.nominal_gpus  # only a team within its own nominal reclaims
        for m in teams:
            used = book.usage[(m.team, m.flavor)]
            assert used <= m.nominal_gpus + (m.borrowing_limit_gpus if m.borrowing_limit_gpus is not None else 10**9)
        total = sum(book.usage[(m.team, m.flavor)] for m in teams)
        assert total <= sum(m.nominal_gpus for m in teams)
        others_use = sum(max(0, book.usage[(m.team, m.flavor)] - m.guaranteed_gpus) for m in teams)
        assert others_use <= sum(m.lendable_gpus for m in teams)
