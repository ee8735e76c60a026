"""control/replicas.py ReplicaScaler and the Deployment annotations it reads (adapters/kubernetes/labels.py):
gpufleet's replica policy over the serving Deployments of a world observed every period (the controller)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.adapters.kubernetes.deployment_json import declared_serving, deployment_from_json
from gpufleet.control.replicas import NO_GAUGES, ReplicaScaler, ServingGauges
from gpufleet.domain.catalog import BUILTIN_PRICE_CATALOG, PRICES_BY_SKU
from gpufleet.domain.errors import ValidationError

PERIOD = 60.0


def _dep(name: str, replicas: int, ann: dict[str, str], *, gpus: str = "1", ready: int | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "web", "name": name, "labels": {"gpufleet.io/kind": "serving"}, "annotations": ann},
        "spec": {"replicas": replicas, "template": {"spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "containers": [{"name": "srv", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}}},
        "status": {"readyReplicas": replicas if ready is None else ready},
    }  # fmt: skip


ANN = {"gpufleet.io/target-rps": "10", "gpufleet.io/max-replicas": "40"}


def test_annotations_declare_the_fleet_and_a_deployment_without_them_is_left_alone() -> None:
    d = declared_serving(_dep("llm", 2, {**ANN, "gpufleet.io/min-replicas": "0", "gpufleet.io/slo-s": "2",
                                          "gpufleet.io/max-concurrency": "4", "gpufleet.io/budget-usd-day": "500",
                                          "gpufleet.io/rps-query": "sum(x)"}, gpus="2"))  # fmt: skip
    assert d is not None
    assert (d.scaling.min_replicas, d.scaling.max_replicas, d.scaling.target_rps_per_replica) == (0, 40, 10.0)
    assert (d.scaling.cold_start_s, d.scaling.scale_down_delay_s, d.scaling.budget_usd_day) == (210, 300, 500.0)
    assert (d.gpus_per_replica, d.gpu_product, d.slo_s, d.max_concurrency, d.rps_query) == (
        2, "NVIDIA-H100-80GB-HBM3", 2.0, 4, "sum(x)")  # fmt: skip
    assert deployment_from_json(_dep("plain", 2, {})).serving is None


@pytest.mark.parametrize(
    ("ann", "field"),
    [
        ({"gpufleet.io/target-rps": "10"}, "gpufleet.io/max-replicas"),  # max is required with target-rps
        ({**ANN, "gpufleet.io/target-rps": "fast"}, "gpufleet.io/target-rps"),
        ({**ANN, "gpufleet.io/target-rps": "0"}, "gpufleet.io/target-rps"),
        ({**ANN, "gpufleet.io/max-replicas": "2.5"}, "gpufleet.io/max-replicas"),
        ({**ANN, "gpufleet.io/min-replicas": "41"}, "gpufleet.io/min-replicas"),
        ({**ANN, "gpufleet.io/cold-start-s": "nan"}, "gpufleet.io/cold-start-s"),
        ({**ANN, "gpufleet.io/budget-usd-day": "-1"}, "gpufleet.io/budget-usd-day"),
    ],
)
def test_a_bad_annotation_is_refused_naming_the_deployment_and_the_annotation(ann: dict[str, str], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        declared_serving(_dep("llm", 2, ann))
    assert "web/llm" in e.value.field and field in e.value.field


def test_each_deployment_keeps_its_own_policy_and_follows_its_own_rate() -> None:
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    a = deployment_from_json(_dep("a", 2, ANN))
    b = deployment_from_json(_dep("b", 2, ANN))  # the same declaration: must not share state with a
    plans = [scaler.plan([a, b], {("web", "a"): 20.0, ("web", "b"): 250.0}, PERIOD * k) for k in range(1, 30)]
    last = {d.name: d for d in plans[-1].decisions}
    assert last["b"].desired >= 25 > last["a"].desired >= 2  # 250 rps at 10 rps a replica: at least 25
    assert all(d.desired <= 40 for p in plans for d in p.decisions)


def test_no_rate_means_no_decision_and_a_changed_declaration_binds_at_once() -> None:
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    dep = deployment_from_json(_dep("llm", 4, ANN))
    plan = scaler.plan([dep], {}, PERIOD)
    assert plan.decisions == () and plan.skipped == (("web", "llm", "no_rate"),)
    for k in range(1, 10):
        scaler.plan([dep], {("web", "llm"): 300.0}, PERIOD * k)
    capped = deployment_from_json(_dep("llm", 31, {**ANN, "gpufleet.io/max-replicas": "12"}))
    d = scaler.plan([capped], {("web", "llm"): 300.0}, PERIOD * 10).decisions[0]
    assert d.desired == 12 and d.current == 31


def test_a_replica_is_priced_from_the_catalog_by_its_gpu_product() -> None:
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    d = declared_serving(_dep("llm", 2, ANN, gpus="4"))
    assert d is not None
    assert scaler.price_usd_per_replica_h(d) == pytest.approx(4 * float(PRICES_BY_SKU["h100_80gb"].on_demand))
    with pytest.raises(ValidationError):
        ReplicaScaler(0, BUILTIN_PRICE_CATALOG)


def test_queued_requests_reach_the_policy_and_an_unobserved_or_bad_gauge_is_no_queue() -> None:
    """The controller's queue signal is the simulator gateway's: a backlog asks for replicas that drain it."""
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    deps = [deployment_from_json(_dep(n, 4, ANN)) for n in ("calm", "backlog", "unread", "bad")]
    rates = {("web", d.name): 30.0 for d in deps}
    queued = {("web", "backlog"): 600.0, ("web", "bad"): float("nan")}
    running = {("web", "backlog"): 40.0, ("web", "calm"): 40.0, ("web", "bad"): -3.0}
    misses = {("web", "bad"): float("inf")}  # not a count: not measured
    plan = scaler.plan(deps, rates, PERIOD, ServingGauges(queued, running, misses))
    got = {d.name: d for d in plan.decisions}
    assert got["backlog"].desired > got["calm"].desired and got["backlog"].reason == "queue_drain"
    # no gauge, or a gauge that is not a count, decides as no queue does
    assert (got["unread"].desired, got["unread"].reason) == (got["calm"].desired, got["calm"].reason)
    assert (got["bad"].desired, got["bad"].reason) == (got["calm"].desired, got["calm"].reason)


def test_gauge_queries_are_declared_per_deployment() -> None:
    ann = {**ANN, "gpufleet.io/queue-query": " sum(q) ", "gpufleet.io/running-query": "sum(r)",
           "gpufleet.io/slo-miss-query": "sum(m)"}  # fmt: skip
    d = declared_serving(_dep("llm", 2, ann))
    assert d is not None and (d.queue_query, d.running_query, d.slo_miss_query) == ("sum(q)", "sum(r)", "sum(m)")
    plain = declared_serving(_dep("llm", 2, ANN))
    assert plain is not None and (plain.queue_query, plain.running_query, plain.slo_miss_query) == ("", "", "")


def test_measured_slo_misses_bring_the_static_floor_in_and_unmeasured_ones_do_not() -> None:
    """A burst hour, then quiet for longer than the burst floor remembers; 200 SLO misses in one quiet period burn
    the error budget, and the fleet goes back to what the burst hour needed (the static floor)."""
    ann = {**ANN, "gpufleet.io/slo-s": "2", "gpufleet.io/max-replicas": "60"}
    runs: list[list[tuple[int, str]]] = []
    for measured in (False, True):
        scaler, current, out = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG), 4, []
        for k in range(1, 58):
            dep = deployment_from_json(_dep("llm", current, ann))
            misses = {("web", "llm"): 200.0 if k == 55 else 0.0} if measured else None
            gauges = ServingGauges(slo_misses=misses) if misses is not None else NO_GAUGES
            d = scaler.plan([dep], {("web", "llm"): 300.0 if k <= 3 else 20.0}, PERIOD * k, gauges)
            current = d.decisions[0].desired
            out.append((current, d.decisions[0].reason))
        runs.append(out)
    unmeasured, measured_run = runs
    assert unmeasured[:54] == measured_run[:54] and unmeasured[53][0] < 10  # the same until the misses; quiet
    assert measured_run[54][1] == "static_floor" and measured_run[54][0] >= 30 > unmeasured[54][0]


def test_a_policy_warmed_from_the_rate_history_decides_as_one_that_ran_through_it() -> None:
    """A new leader replays the history: its first decision is the one a controller deciding all along makes."""
    ann = {**ANN, "gpufleet.io/slo-s": "2", "gpufleet.io/max-replicas": "60"}
    history = [(PERIOD * k, 300.0 if 20 <= k <= 22 else 20.0) for k in range(1, 40)]  # a burst 18-20 periods ago
    dep = deployment_from_json(_dep("llm", 4, ann))
    ran = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    for t, rps in history:
        ran.plan([dep], {("web", "llm"): rps}, t)
    warmed, cold = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG), ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    assert not warmed.knows(dep) and warmed.warm(dep, [*history, (PERIOD * 41, float("nan"))]) == len(history)
    assert warmed.knows(dep) and warmed.warm(dep, history) == 0  # a running policy is not replayed twice
    now = {("web", "llm"): 20.0}
    first = [s.plan([dep], now, PERIOD * 40).decisions[0] for s in (ran, warmed, cold)]
    assert first[0] == first[1] and first[1].desired > first[2].desired, first  # the burst is remembered


def test_the_fast_path_scales_up_on_a_growing_queue_only_and_only_a_running_policy() -> None:
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    dep = deployment_from_json(_dep("llm", 4, ANN))
    new = deployment_from_json(_dep("new", 4, ANN))
    key = ("web", "llm")
    assert scaler.react([dep], {key: 300.0}, 10.0).decisions == ()  # no period decided yet: left to the period
    for k in range(1, 6):
        scaler.plan([dep], {key: 20.0}, PERIOD * k)
    at = PERIOD * 5 + 15
    assert scaler.react([dep], {key: 20.0}, at).decisions == ()  # nothing grew
    surge = scaler.react([dep, new], {key: 300.0, ("web", "new"): 300.0}, at, ServingGauges(queued={key: 800.0}))
    (d,) = surge.decisions
    assert d.name == "llm" and d.reason == "queue_growth" and 30 <= d.desired <= 40 and d.current == 4
    big = deployment_from_json(_dep("llm", 39, ANN))  # already above what the surge needs: never a scale-down
    assert scaler.react([big], {key: 20.0}, at, ServingGauges(queued={key: 0.0})).decisions == ()
    # the fast path taught the policy nothing: the next period decides as a scaler that never reacted
    twin = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    for k in range(1, 6):
        twin.plan([dep], {key: 20.0}, PERIOD * k)
    assert scaler.plan([dep], {key: 20.0}, PERIOD * 6) == twin.plan([dep], {key: 20.0}, PERIOD * 6)


def test_a_warm_start_replays_the_queue_and_the_slo_misses_too() -> None:
    """Misses measured before a new leader took over still hold the static floor after it (as they would have)."""
    ann = {**ANN, "gpufleet.io/slo-s": "2", "gpufleet.io/max-replicas": "60"}
    dep = deployment_from_json(_dep("llm", 4, ann))
    key = ("web", "llm")
    times = [PERIOD * k for k in range(1, 56)]
    rates = {t: 300.0 if t <= PERIOD * 3 else 20.0 for t in times}
    misses = {t: 200.0 if t == PERIOD * 55 else 0.0 for t in times}
    queue = {t: 50.0 if t == PERIOD * 2 else 0.0 for t in times}
    ran = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    for t in times:
        ran.plan([dep], {key: rates[t]}, t, ServingGauges(queued={key: queue[t]}, slo_misses={key: misses[t]}))
    warmed, rate_only = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG), ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    assert warmed.warm(dep, sorted(rates.items()), queue, None, misses) == len(times)
    rate_only.warm(dep, sorted(rates.items()))
    first = [
        s.plan([dep], {key: 20.0}, PERIOD * 56, ServingGauges(slo_misses={key: 0.0})).decisions[0]
        for s in (ran, warmed, rate_only)
    ]
    assert first[0] == first[1] and first[1].reason == "static_floor" and first[2].desired < first[1].desired


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 2_000, allow_nan=False),
            st.one_of(st.none(), st.floats(-10, 5_000), st.sampled_from([float("nan"), float("inf"), -float("inf")])),
            st.integers(0, 45),
        ),
        min_size=1,
        max_size=25,
    )
)
def test_decisions_stay_within_the_declared_bounds_and_the_fast_path_only_scales_up(
    steps: list[tuple[float, float | None, int]],
) -> None:
    """Whatever the rates, gauges (missing, negative, NaN, infinite) and replica counts, plan and react decide
    within [min, max], and react never asks for fewer replicas than there are."""
    ann = {**ANN, "gpufleet.io/min-replicas": "2", "gpufleet.io/max-replicas": "30", "gpufleet.io/slo-s": "2"}
    scaler = ReplicaScaler(PERIOD, BUILTIN_PRICE_CATALOG)
    key = ("web", "llm")
    for k, (rps, gauge, replicas) in enumerate(steps, start=1):
        dep = deployment_from_json(_dep("llm", replicas, ann))
        g = NO_GAUGES if gauge is None else ServingGauges({key: gauge}, {key: gauge}, {key: gauge})
        for plan in (
            scaler.plan([dep], {key: rps}, PERIOD * k, g),
            scaler.react([dep], {key: rps}, PERIOD * k + 15, g),
        ):
            for d in plan.decisions:
                assert 2 <= d.desired <= 30 and d.current == replicas
        assert all(d.desired > replicas for d in scaler.react([dep], {key: rps}, PERIOD * k + 30, g).decisions)
