"""Placement degrades gracefully: next link with a reason, downshift or queue, never an error."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.catalog import default_pools
from gpufleet.domain.pools import Tier
from gpufleet.domain.workloads import DegradeOption, Priority, ServingScaling, Workload, WorkloadKind
from gpufleet.place.degrade import DegradeRequest, PoolHeadroom, RunningWork, recommend

POOLS = {p.tier: p for p in default_pools("h100_80gb")}
L40S = {p.tier: p for p in default_pools("l40s")}


def _serving(**kw: object) -> Workload:
    return Workload(
        "svc",
        "chat",
        WorkloadKind.SERVING,
        "t",
        "tn",
        Priority.CRITICAL,
        ("h100_80gb",),
        8,
        scaling=ServingScaling(4, 16, 2.0),
        **kw,  # type: ignore[arg-type]
    )


def _training(**kw: object) -> Workload:
    base: dict[str, object] = {"checkpoint_interval_s": 1800, "gang_size": 2, "priority": Priority.NORMAL}
    base.update(kw)
    return Workload(
        "job",
        "pretrain",
        WorkloadKind.TRAINING,
        "t",
        "tn",
        acceptable_skus=("h100_80gb",),
        gpus_per_replica=8,
        **base,  # type: ignore[arg-type]
    )


def _state(tier: Tier, free: float, **kw: object) -> PoolHeadroom:
    return PoolHeadroom(POOLS[tier], free, **kw)  # type: ignore[arg-type]


def test_exhausted_pool_yields_the_next_link_with_a_reason() -> None:
    req = DegradeRequest(_training(), 0, (_state(Tier.RESERVED, 0), _state(Tier.ON_DEMAND, 100)))
    d = recommend(req)
    assert d.action == "place" and d.tier == "on_demand"
    assert [(s.tier, s.trigger) for s in d.skipped] == [(Tier.RESERVED, "quota_headroom")]
    assert d.chain[-1].pool_id is None  # the chain ends in the queue


def test_stockout_and_utilization_are_explicit_triggers() -> None:
    req = DegradeRequest(
        _training(),
        0,
        (
            _state(Tier.RESERVED, 100, utilization=0.99),
            _state(Tier.ON_DEMAND, 100, stockout=True),
            _state(Tier.SPOT, 100),
        ),
    )
    d = recommend(req)
    assert d.tier == "spot"
    assert [s.trigger for s in d.skipped] == ["pool_utilization", "stockout"]


def test_serving_is_never_placed_on_spot() -> None:
    req = DegradeRequest(
        _serving(), 0, (_state(Tier.ON_DEMAND, 0), _state(Tier.SPOT, 1000), _state(Tier.SECONDARY, 100))
    )
    d = recommend(req)
    assert d.tier == "secondary"
    assert "serving_never_spot" in [s.trigger for s in d.skipped]
    assert all(s.tier is not Tier.SPOT for s in d.chain)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(list(Tier)), st.integers(0, 64), st.booleans(), st.floats(0, 1)), max_size=6),
    st.booleans(),
)
def test_any_pool_state_gives_a_decision_and_serving_never_rides_spot(
    pools: list[tuple[Tier, int, bool, float]], serving: bool
) -> None:
    states = tuple(PoolHeadroom(POOLS[t], free, utilization=u, stockout=so) for t, free, so, u in pools)
    w = _serving() if serving else _training(checkpoint_interval_s=None)
    d = recommend(DegradeRequest(w, 0, states))
    assert d.action in {"place", "degrade", "preempt", "queue"}
    if d.action != "queue":
        assert d.tier != "spot"
    else:
        assert d.pool_id is None


def test_provider_share_cap_holds() -> None:
    # aws already has 90 of 100 GPUs; with a 0.6 cap the job goes to the neocloud secondary pool
    req = DegradeRequest(
        _training(checkpoint_interval_s=None),
        0,
        (_state(Tier.ON_DEMAND, 100), _state(Tier.SECONDARY, 100)),
        provider_gpus_in_use={"aws": 90.0, "nebius": 10.0},
        max_provider_share=0.6,
    )
    d = recommend(req)
    assert d.pool_id == POOLS[Tier.SECONDARY].id
    assert d.skipped[0].trigger == "provider_share_cap"
    use = {"aws": 90.0, "nebius": 10.0}
    provider = POOLS[Tier.SECONDARY].provider_id
    use[provider] = use.get(provider, 0.0) + d.gpus
    assert use[provider] / sum(use.values()) <= 0.6


def test_unmeetable_deadline_downshifts_to_a_declared_option() -> None:
    w = _training(
        deadline_s=10 * 3600,
        degrade_options=(DegradeOption(gpus_per_replica=4), DegradeOption(sku_id="l40s")),
    )
    pools = (
        _state(Tier.RESERVED, 8, queue_wait_s=20 * 3600),  # 16 needed, 8 free; queue too long for the deadline
        PoolHeadroom(L40S[Tier.ON_DEMAND], 0),
    )
    d = recommend(DegradeRequest(w, 0, pools, expected_run_s=3600))
    assert d.action == "degrade" and d.degrade == DegradeOption(gpus_per_replica=4)
    assert d.gpus == 8 and d.tier == "reserved"
    assert d.skipped[0].trigger == "queue_wait_exceeds_deadline"


def test_unmeetable_deadline_without_options_queues_with_expected_start() -> None:
    w = _training(deadline_s=5 * 3600)
    pools = (_state(Tier.RESERVED, 0, queue_wait_s=8 * 3600), _state(Tier.ON_DEMAND, 0, queue_wait_s=6 * 3600))
    d = recommend(DegradeRequest(w, 1000, pools, expected_run_s=3600))
    assert d.action == "queue"
    assert d.expected_start_s == 1000 + 6 * 3600
    assert d.reason == "queued_deadline_at_risk"


def test_queue_with_deadline_met_says_so() -> None:
    w = _training(deadline_s=100 * 3600)
    d = recommend(DegradeRequest(w, 0, (_state(Tier.RESERVED, 0, queue_wait_s=3600),), expected_run_s=3600))
    assert d.action == "queue" and d.reason == "queued_deadline_ok" and d.expected_start_s == 3600


def test_preempts_lower_priority_training_but_never_serving_for_training() -> None:
    running = (
        RunningWork("low-job", POOLS[Tier.RESERVED].id, 16, Priority.LOW, WorkloadKind.TRAINING),
        RunningWork("svc-low", POOLS[Tier.RESERVED].id, 64, Priority.LOW, WorkloadKind.SERVING),
    )
    w = _training(checkpoint_interval_s=None, priority=Priority.HIGH)
    d = recommend(DegradeRequest(w, 0, (_state(Tier.RESERVED, 0),), running=running))
    assert d.action == "preempt" and d.victims == ("low-job",)
    big = _training(checkpoint_interval_s=None, priority=Priority.HIGH, gang_size=8)  # 64 GPUs: serving can't be taken
    d2 = recommend(DegradeRequest(big, 0, (_state(Tier.RESERVED, 0),), running=running))
    assert d2.action == "queue"
