"""Waiting for capacity that frees before a launched node would be ready (sim/freeing.py + the node scaler)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.nodes_baseline import IdleTimeoutScaleDown
from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.ports import NodeScaler
from gpufleet.sim.builtin import steady_scenario
from gpufleet.sim.freeing import report_beyond_until
from gpufleet.sim.run import baseline_loop
from gpufleet.sim.scenario import Scenario
from gpufleet.sim.world import World

A_END = 43_200  # run "a" holds both reserved nodes until 12:00
B_ARRIVES = 42_768  # 432 s before: a launched node (600 s start) would be ready after "a" ends
C_ARRIVES = 42_776  # int(0.4951 days)


def _scenario(eta_error_sd: float, with_c: bool = False) -> Scenario:
    run = {"team": "t", "sku": "h100_80gb", "gpus": 16, "checkpoint_interval_s": 1800}
    runs = [
        {**run, "name": "a", "start_day": 0.0, "duration_days": 0.5},
        {**run, "name": "b", "start_day": 0.495, "duration_days": 0.1},
    ]
    if with_c:  # arrives 8 s after "b" and finds the freeing nodes claimed
        runs.append({**run, "name": "c", "start_day": 0.4951, "duration_days": 0.1})
    return Scenario.model_validate(
        {
            "name": "freeing",
            "seed": 1,
            "days": 1,
            "pools": [
                {
                    "sku": "h100_80gb",
                    "reservations": [{"gpus": 16, "remaining_months": 12}],
                    "on_demand_quota_gpus": 64,
                    "on_demand_mean_stockout_h": 0.0,
                }
            ],
            "planned_runs": runs,
            "failures": {"node_mtbf_days": 10_000.0},
            "control": {"eta_error_sd": eta_error_sd},
        }
    )


def _run(sc: Scenario, scaler: NodeScaler) -> tuple[World, dict[str, int]]:
    loop = baseline_loop(sc, 1)
    loop.node_scaler = scaler
    w = World(sc, loop)
    w.run()
    w.check_invariants()
    pods = w.pods
    starts = {pods.group[p].removeprefix("planned/"): pods.first_start[p] for p in range(pods.n_jobs)}
    return w, starts


def _launched(w: World) -> int:
    return sum(pr.launched for pr in w.fleet.pools if pr.pool.tier.value != "reserved")


def test_a_gang_waits_for_nodes_that_free_before_a_launch_would_be_ready() -> None:
    w, starts = _run(_scenario(0.0), PayoffAwareNodes.default())
    assert _launched(w) == 0
    assert starts["b"] == A_END  # no later than on a launched node (42,768 + 600 = 43,368)
    base, base_starts = _run(_scenario(0.0), IdleTimeoutScaleDown())
    assert _launched(base) == 2  # the baseline launches both nodes, which then never run a pod
    assert base_starts["b"] == A_END


def test_freeing_nodes_are_claimed_once() -> None:
    w, starts = _run(_scenario(0.0, with_c=True), PayoffAwareNodes.default())
    assert starts["b"] == A_END
    assert _launched(w) == 2  # "c" cannot count the nodes "b" waits for: it launches its own
    assert starts["c"] == C_ARRIVES + 600


def test_with_eta_errors_the_gang_still_starts_when_the_nodes_free() -> None:
    """An early estimate makes the pod wait and look again (RECHECK) until the nodes free; a late one launches."""
    for sd in (0.3, 1.0, 3.0):
        w, starts = _run(_scenario(sd), PayoffAwareNodes.default())
        assert starts["b"] == A_END
        assert _launched(w) in (0, 2)
        assert not any(w.freeing.claims[s] for s in range(len(w.sku_ids)))  # claims end with the wait


def test_the_scaler_can_ignore_freeing_nodes() -> None:
    w, _ = _run(_scenario(0.0), PayoffAwareNodes(wait_for_freeing=False))
    assert _launched(w) == 2


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    sd=st.sampled_from([0.0, 0.2, 1.0]),
    mtbf=st.sampled_from([2.0, 250.0]),
)
def test_waiting_keeps_the_books_and_claims_stay_within_each_pods_need(seed: int, sd: float, mtbf: float) -> None:
    sc = steady_scenario(gpus=128, days=3, seed=seed)
    sc = sc.model_copy(
        update={
            "control": sc.control.model_copy(update={"eta_error_sd": sd}),
            "failures": sc.failures.model_copy(update={"node_mtbf_days": mtbf}),
        }
    )
    loop = baseline_loop(sc, seed)
    loop.node_scaler = PayoffAwareNodes.default()
    w = World(sc, loop)
    for day in range(1, sc.days + 1):
        w.run(until_s=day * 86_400 - 1)
        w.check_invariants()
        for s, claims in enumerate(w.freeing.claims):
            for pod, k in claims.items():
                per = w.per_node[s]
                assert w.pods.sku[pod] == s and 1 <= k <= max(1, w.pods.gpus[pod] // per)
    w.run()
    w.check_invariants()


@given(
    end=st.integers(0, 10**8),
    now=st.integers(0, 10**8),
    mult=st.floats(0.1, 3.0),
    within=st.integers(0, 7200),
)
def test_report_bound_never_hides_a_job_that_reports_within_the_window(
    end: int, now: int, mult: float, within: int
) -> None:
    """The cached per-node bound may only skip a node when its job really reports an end beyond the window."""
    left = end - now
    reported = now + int(left * mult) if left > 0 else now
    bound = report_beyond_until(end, mult, within)
    if now < bound - 1e-3:
        assert reported > now + within
    if now > bound + 1e-3:  # and it is tight: past the bound the report is within the window
        assert reported <= now + within
