"""The start buffer: its hourly step on the late share, its top-up, the scalers' hold, and the simulator's wiring."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.autoscale.nodes_baseline import IdleTimeoutScaleDown
from gpufleet.autoscale.nodes_payoff import PayoffAwareNodes
from gpufleet.control.start_buffer import LateReading, StartBuffer, lane_sku, spot_lane
from gpufleet.ports import IdleNode, ScaleDownContext, within_buffer
from gpufleet.sim.builtin import lab_dev_scenario
from gpufleet.sim.kinds import SPOT_RANK
from gpufleet.sim.run import gpufleet_loop, simulate, summarize
from gpufleet.sim.world import World


def idle(node_id: int, tier: str = "on_demand", idle_for_s: int = 7200) -> IdleNode:
    return IdleNode(node_id, f"h100/{tier}", "h100_80gb", tier, 8, idle_for_s, idle_for_s + 3600, 600, 6.88)


def down_ctx(nodes: list[IdleNode], free: int, keep: int, buffer_free: int | None = None) -> ScaleDownContext:
    return ScaleDownContext(
        86_400, "h100_80gb", nodes, 0, free, 64, None, 0.0, 6.88,
        keep_free_gpus=keep, buffer_free_gpus=free if buffer_free is None else buffer_free,
    )  # fmt: skip


def one(b: StartBuffer, arrived: int, late: int, sku: str = "h100") -> int:
    return b.decide({sku: LateReading(arrived, late, 55.0)})[sku].nodes


def test_the_buffer_steps_up_while_jobs_start_late_and_down_when_they_do_not() -> None:
    b = StartBuffer(setpoint=1.0, max_nodes=2)  # aim: 5 % of the jobs late
    assert one(b, 100, 6) == 1
    assert one(b, 100, 9) == 2
    assert one(b, 100, 9) == 2  # never above max_nodes
    assert one(b, 100, 4) == 2  # within the band: held
    d = b.decide({"h100": LateReading(100, 2, 55.0)})["h100"]
    assert d.nodes == 1 and d.reason.startswith("start_buffer: 2 of 100 training jobs")
    assert b.decide({})["h100"].nodes == 0  # a SKU with a buffer and no reading: no jobs, no late share
    assert b.nodes("h100") == 0


def test_the_fleet_share_steps_the_sku_where_a_node_meets_the_most_late_starts_per_dollar() -> None:
    """The objective is over every training job of the fleet: one node in all per hour, up on the SKU whose late
    jobs per node-dollar are the most (a cheap SKU's many small late jobs before an expensive SKU's few), down on
    the one where they are the fewest; a SKU within its own aim may still be warmed for the fleet's."""
    b = StartBuffer(setpoint=1.0, max_nodes=2)
    cheap, dear = LateReading(200, 12, 15.0), LateReading(100, 6, 60.0)  # 6 %; 12/15 > 6/60 per node-dollar
    got = b.decide({"l40s": cheap, "h200": dear})
    assert (got["l40s"].nodes, got["h200"].nodes) == (1, 0) and "l40s: 12 of 200 late" in got["l40s"].reason
    got = b.decide({"l40s": cheap, "h200": dear})
    assert (got["l40s"].nodes, got["h200"].nodes) == (2, 0)
    got = b.decide({"l40s": cheap, "h200": dear})  # the cheap SKU at max_nodes: the next one warms
    assert (got["l40s"].nodes, got["h200"].nodes) == (2, 1)
    got = b.decide({"l40s": LateReading(200, 3, 15.0), "h200": LateReading(100, 1, 60.0)})  # 1.3 %: below half
    assert (got["l40s"].nodes, got["h200"].nodes) == (2, 0)  # the fewest late starts per node-dollar goes first
    got = b.decide({"l40s": LateReading(200, 0, 15.0), "h200": LateReading(100, 30, 60.0)})  # 10 %
    assert (got["l40s"].nodes, got["h200"].nodes) == (2, 1)  # only a SKU with late jobs is stepped up


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.floats(1.0, 100.0)), min_size=1, max_size=4),
       st.integers(0, 3), st.integers(1, 12))  # fmt: skip
def test_one_node_in_all_per_hour_and_never_above_max_nodes(
    rows: list[tuple[int, int, float]], max_nodes: int, hours: int
) -> None:
    b = StartBuffer(max_nodes=max_nodes)
    readings = {f"sku{i}": LateReading(a + late, late, p) for i, (a, late, p) in enumerate(rows)}
    before = {k: 0 for k in readings}
    for _ in range(hours):
        got = b.decide(readings)
        assert sum(abs(got[k].nodes - before[k]) for k in readings) <= 1
        assert all(0 <= d.nodes <= max_nodes for d in got.values())
        before = {k: got[k].nodes for k in readings}


@pytest.mark.parametrize("bad", [{"objective": 1.0}, {"setpoint": 0.0}, {"window_h": 0}, {"top_up_at": 1.5}])
def test_a_meaningless_setting_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StartBuffer(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [LateReading(3, 4, 55.0), LateReading(-1, 0, 55.0), LateReading(3, 1, 0.0)])
def test_a_reading_out_of_range_is_refused_naming_the_sku(bad: LateReading) -> None:
    with pytest.raises(ValueError, match="h100"):
        StartBuffer().decide({"h100": bad})


def test_the_top_up_launches_the_missing_whole_nodes_only_past_its_threshold() -> None:
    eager, half = StartBuffer(), StartBuffer(top_up_at=0.5)
    assert eager.launch_nodes(1, 8, 7, 0) == 1  # one GPU taken: a node starts at once
    assert half.launch_nodes(1, 8, 7, 0) == 0 and half.launch_nodes(1, 8, 4, 0) == 1
    assert eager.launch_nodes(2, 8, 3, 0) == 2 and eager.launch_nodes(2, 8, 3, 1) == 1
    assert eager.launch_nodes(1, 8, 12, 0) == 0 and eager.launch_nodes(0, 8, 0, 0) == 0


def test_scalers_keep_the_buffers_gpus_free() -> None:
    nodes = [idle(1), idle(2), idle(3, tier="spot")]
    c = down_ctx(nodes, free=24, keep=8, buffer_free=16)
    assert IdleTimeoutScaleDown(unneeded_s=600).scale_down(c) == [(1, "idle_past_unneeded_time"),
                                                                   (3, "idle_past_unneeded_time")]  # fmt: skip
    assert [n for n, _ in IdleTimeoutScaleDown(unneeded_s=600).scale_down(replace(c, keep_free_gpus=0))] == [1, 2, 3]
    payoff = PayoffAwareNodes(delay_weight=0.0)  # no rent-or-buy hold: every idle node past its time would go
    got = [n for n, _ in payoff.scale_down(c)]
    assert 3 in got and len([n for n in got if n in (1, 2)]) == 1
    assert payoff.held.get("start_buffer_hold") == 1


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["on_demand", "spot", "secondary"]), min_size=0, max_size=8),
    st.integers(0, 64),
    st.integers(0, 40),
)
def test_releases_never_take_the_buffers_free_gpus_below_what_it_keeps(tiers: list[str], keep: int, extra: int) -> None:
    nodes = [idle(i, tier=t) for i, t in enumerate(tiers)]
    counted = 8 * sum(t != "spot" for t in tiers) + extra
    c = down_ctx(nodes, free=counted + 8 * tiers.count("spot"), keep=keep, buffer_free=counted)
    asked = [(n.node_id, "r") for n in nodes]
    kept = within_buffer(c, asked)
    left = counted - 8 * sum(nodes[i].tier != "spot" for i, _ in kept)
    assert left >= min(keep, counted)  # never below the buffer (nor below what was free to begin with)
    if keep == 0:
        assert kept == asked
    assert {i for i, _ in kept if nodes[i].tier == "spot"} == {i for i, t in enumerate(tiers) if t == "spot"}


def test_the_simulator_holds_and_launches_the_buffer() -> None:
    sc = lab_dev_scenario(gpus=128, days=12)
    on = gpufleet_loop(sc, 3)
    assert on.start_buffer is not None
    off = gpufleet_loop(sc, 3)
    off.start_buffer = None
    w_on, s_on = simulate(sc, seed=3, loop=on)
    _, s_off = simulate(sc, seed=3, loop=off)
    launched = sum(v[0] for k, v in w_on.decisions.sums.items() if k[2] == "scale_up" and k[3] == "start_buffer")
    details = [w_on.decisions.details[k] for k in w_on.decisions.sums if k[3] == "start_buffer"]
    assert launched > 0 and all("jobs of the last 6 h started more than 60 s" in t for t in details)
    assert s_on["p50_queue_wait_s"] <= s_off["p50_queue_wait_s"]
    assert s_on["cost_conserved"] and s_off["cost_conserved"]


def test_a_spot_lane_key_names_its_sku() -> None:
    assert spot_lane("h100_80gb") == "h100_80gb@spot"
    assert lane_sku(spot_lane("h100_80gb")) == ("h100_80gb", True)
    assert lane_sku("h100_80gb") == ("h100_80gb", False)


def test_the_spot_lane_is_warmed_first_at_the_same_late_starts_for_its_cheaper_node() -> None:
    """A SKU read as two lanes: its checkpointed jobs' late starts met by a spot node (a fifth of the price) rank
    above the same count on demand; the fleet's share is over both lanes, each job counted once."""
    b = StartBuffer(setpoint=1.0, max_nodes=1, spot=True)
    readings = {"h100_80gb": LateReading(100, 6, 8 * 6.88), spot_lane("h100_80gb"): LateReading(100, 6, 8 * 1.25)}
    got = b.decide(readings)
    assert (got["h100_80gb"].nodes, got[spot_lane("h100_80gb")].nodes) == (0, 1)
    assert "12 of 200 training jobs" in got["h100_80gb"].reason
    got = b.decide(readings)
    assert (got["h100_80gb"].nodes, got[spot_lane("h100_80gb")].nodes) == (1, 1)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from(["on_demand", "spot", "secondary"]), min_size=0, max_size=8),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(0, 16),
)
def test_releases_keep_the_spot_lanes_gpus_free_on_spot_nodes(
    tiers: list[str], keep: int, keep_spot: int, extra: int
) -> None:
    nodes = [idle(i, tier=t) for i, t in enumerate(tiers)]
    off_spot = 8 * sum(t != "spot" for t in tiers) + extra
    on_spot = 8 * tiers.count("spot") + extra
    c = replace(
        down_ctx(nodes, free=off_spot + on_spot, keep=keep, buffer_free=off_spot),
        keep_free_spot_gpus=keep_spot,
        spot_free_gpus=on_spot,
    )
    asked = [(n.node_id, "r") for n in nodes]
    kept = within_buffer(c, asked)
    gone_spot = 8 * sum(nodes[i].tier == "spot" for i, _ in kept)
    gone_off = 8 * sum(nodes[i].tier != "spot" for i, _ in kept)
    assert on_spot - gone_spot >= min(keep_spot, on_spot) and off_spot - gone_off >= min(keep, off_spot)
    if keep_spot == 0:  # no spot lane: every spot node asked goes, as before lanes
        assert {i for i, _ in kept if nodes[i].tier == "spot"} == {i for i, t in enumerate(tiers) if t == "spot"}


def test_the_simulator_reads_each_job_in_one_lane_and_holds_the_spot_lane_on_spot() -> None:
    """Hourly, each training job counts in one lane (checkpointed: the spot lane); while the spot lane holds
    nodes, the world keeps spot GPUs free for it (launched, and kept from scale-down) within the spot room."""
    sc = lab_dev_scenario(gpus=128, days=12)
    loop = gpufleet_loop(sc, 3)
    rule = loop.start_buffer
    assert rule is not None and rule.spot
    w = World(sc, loop, seed=3)
    prov, held, held_free = w.provisioner, 0, 0
    for hour in range(1, 12 * 24):
        w.run(until_s=hour * 3600 + 1)  # just past the hourly decision and the tick at the hour
        for s, sku in enumerate(w.sku_ids):
            both = w.pods.late_starts(s, hour * 3600, 6 * 3600, 60)
            ckpt = w.pods.late_starts(s, hour * 3600, 6 * 3600, 60, True)
            rest = w.pods.late_starts(s, hour * 3600, 6 * 3600, 60, False)
            assert (ckpt[0] + rest[0], ckpt[1] + rest[1]) == both
            want = rule.nodes(spot_lane(sku)) * prov.per_node[s]
            assert want == prov.spot_buffer_gpus(s)
            if want and w.queues.pending_gpus[s] == 0:
                held += 1
                held_free += prov.free_gpus(s, (SPOT_RANK,)) > 0 or prov.spot_lane_pool(s) < 0
    w.run()
    assert held > 0 and held_free > 0
    assert summarize(w)["cost_conserved"]
