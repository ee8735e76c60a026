"""The controller's usage meter (adapters/kubernetes/usage.py): GPU-seconds integrated between observations per
hour, conserved across hour boundaries; gaps not assumed; records with the pool of the node's region, SKU and tier,
and utilization only where DCGM measured it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.adapters.kubernetes.usage import (
    ClosedHour,
    MeterLoop,
    UsageKey,
    UsageMeter,
    holdings,
    pod_utilization,
    safe_id,
    usage_records,
)
from gpufleet.control.observation import Observation, ObservedNode, ObservedPod
from gpufleet.cost.telemetry import SeriesKey, TelemetryBatch
from gpufleet.schedule.table import NodeSpec, PodRequest
from gpufleet.service.ingest import _ID as INGEST_ID

H = 3600
T0 = 1_764_547_200  # an hour's start
KEY_A = UsageKey("ns:a", "team-a", "h100_80gb", "aws/us-east-1/h100_80gb/on_demand", "k8s:c:us-east-1:h100_80gb:od")
KEY_B = UsageKey("ns:b", "team-b", "h100_80gb", None, "k8s:c:h100_80gb")


@given(
    steps=st.lists(st.tuples(st.floats(1, 300), st.integers(0, 8), st.integers(0, 4)), min_size=1, max_size=60),
    start=st.floats(0, 2 * H),
)
def test_gpu_seconds_are_conserved_across_hours(steps: list[tuple[float, int, int]], start: float) -> None:
    """Every GPU-second held between two observations (gaps within max_gap_s) lands in exactly one hour, and each
    hour's observed seconds are the time it was watched."""
    m = UsageMeter(bucket_s=H, max_gap_s=300)
    t = T0 + start
    expected = 0.0
    held = {("ns", "a"): (KEY_A, 0.0)}
    m.observe(t, held)
    for dt, a, b in steps:
        expected += sum(g for _, g in held.values()) * dt
        t += dt
        held = {("ns", "a"): (KEY_A, float(a)), ("ns", "b"): (KEY_B, b / 2)}
        m.observe(t, held)
    hours = m.closed(t + 2 * H)
    got = sum(g for h in hours for _, g in h.pod_gpu_s.values())
    # times are UNIX seconds (~1.8e9), where doubles are 2.4e-7 s apart: each step's interval carries that error
    assert np.isclose(got, expected, rtol=1e-9, atol=1e-3)
    assert np.isclose(sum(h.covered_s for h in hours), t - (T0 + start), rtol=1e-9, atol=1e-4)
    assert all(h.start_s % H == 0 and 0 < h.covered_s <= H + 1e-6 for h in hours)
    assert m.closed(t + 10 * H) == []  # taken once


def test_a_gap_longer_than_max_gap_is_not_assumed() -> None:
    m = UsageMeter(bucket_s=H, max_gap_s=300)
    m.observe(T0, {("ns", "a"): (KEY_A, 8.0)})
    m.observe(T0 + 60, {("ns", "a"): (KEY_A, 8.0)})  # 60 s at 8 GPUs
    m.observe(T0 + 60 + 1200, {("ns", "a"): (KEY_A, 8.0)})  # 20 minutes unseen: not integrated
    m.observe(T0 + 60 + 1200 + 30, {})
    (hour,) = m.closed(T0 + H)
    assert hour.covered_s == 90 and hour.pod_gpu_s[("ns", "a")] == (KEY_A, 8.0 * 90)
    m.observe(T0 + 10, {("ns", "a"): (KEY_A, 99.0)})  # the clock went back: ignored
    assert m.closed(T0 + 10 * H) == []


def test_records_average_over_the_observed_seconds_and_weight_utilization_by_gpu_seconds() -> None:
    hour = ClosedHour(T0, 1800.0, {
        ("ns", "a-1"): (KEY_A, 8.0 * 1800), ("ns", "a-2"): (KEY_A, 4.0 * 900), ("ns", "b-1"): (KEY_B, 2.0 * 1800),
    })  # fmt: skip
    got = usage_records(hour, {("ns", "a-1"): 0.5, ("ns", "a-2"): 1.0}, H)
    # b has no DCGM reading: written with its utilization not measured, and reported
    rec, dark = sorted(got.records, key=lambda r: str(r["workload_id"]))
    assert rec["workload_id"] == "ns:a" and rec["pool_id"] == KEY_A.pool_id and rec["bucket_s"] == H
    assert rec["gpus_allocated"] == (8.0 * 1800 + 4.0 * 900) / 1800  # 10 GPUs on average while watched
    assert rec["gpu_util"] == round((0.5 * 8 * 1800 + 1.0 * 4 * 900) / (8 * 1800 + 4 * 900), 6)
    assert (dark["workload_id"], dark["gpus_allocated"], dark["gpu_util"]) == ("ns:b", 2.0, None)
    assert got.util_unmeasured_gpu_h == 1.0 and not got.undercovered and got.unwritten_gpu_h == 0
    short = usage_records(ClosedHour(T0, 1000.0, hour.pod_gpu_s), {("ns", "a-1"): 0.5}, H)
    assert short.records == [] and short.undercovered  # watched less than half the hour: not written
    assert short.unwritten_gpu_h == (8.0 * 1800 + 4.0 * 900 + 2.0 * 1800) / 3600


def _node(name: str, region: str, capacity: str, product: str = "NVIDIA-H100-80GB-HBM3") -> ObservedNode:
    return ObservedNode(NodeSpec(name, 128_000, 1_024_000, 8), sku=product, region=region, capacity_type=capacity)


def _pod(name: str, node: str, gpus: int, milli: int = 1000, **kw: Any) -> ObservedPod:
    return ObservedPod(PodRequest(f"ns/{name}", 1000, 1024, gpus, milli), "ns", name, name, "Running", node=node,
                       **kw)  # fmt: skip


def test_holdings_name_the_pool_of_the_nodes_region_sku_and_tier() -> None:
    obs = Observation(
        now_s=T0,
        nodes=(_node("e", "us-east-1", "on-demand"), _node("w", "us-west-2", "spot"), _node("x", "us-east-1", ""),
               _node("m", "us-east-1", "on-demand", "Mystery-GPU")),
        pods=(_pod("t-0", "e", 4, owner_name="train", team="research"), _pod("s-0", "w", 1, 500),
              _pod("u-0", "x", 2), _pod("q-0", "m", 1), _pod("cpu", "e", 0), _pod("idle", "", 2),
              _pod("r-0", "e", 1, owner_name="chat", annotations=(("gpufleet.io/workload-id", "wl-chat"),))),
    )  # fmt: skip
    pools = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}
    got = holdings(obs, "prod", ["h100_80gb", "a100_80gb"], pools)
    assert got.skipped == (("ns/q-0", "unknown_sku"),)
    key, gpus = got.pods[("ns", "t-0")]
    assert (key.workload_id, key.team_id, key.pool_id, gpus) == ("ns:train", "research", pools[("us-east-1",
            "h100_80gb", "on_demand")], 4.0)  # fmt: skip
    assert key.source == "k8s:prod:us-east-1:h100_80gb:on_demand"
    spot, share = got.pods[("ns", "s-0")]
    assert spot.pool_id is None and spot.source == "k8s:prod:h100_80gb" and share == 0.5  # no spot pool stored
    assert got.pods[("ns", "u-0")][0].pool_id is None  # capacity type unknown: no pool
    assert got.pods[("ns", "r-0")][0].workload_id == "wl-chat"  # a workload registered in the service
    assert set(got.pods) == {("ns", "t-0"), ("ns", "s-0"), ("ns", "u-0"), ("ns", "r-0")}
    mapped = holdings(obs, "prod", ["h100_80gb"], pools, {"Mystery-GPU": "h100_80gb"})  # --sku PRODUCT=SKU_ID
    assert mapped.skipped == () and mapped.pods[("ns", "q-0")][0].pool_id == pools[("us-east-1", "h100_80gb",
                                                                                    "on_demand")]  # fmt: skip


@given(st.text(max_size=300))
def test_any_text_becomes_an_id_the_store_takes(raw: str) -> None:
    got = safe_id(raw)
    assert INGEST_ID.fullmatch(got), (raw, got)
    assert safe_id(raw) == got  # the same workload maps to the same id every hour


def test_ids_are_store_ids() -> None:
    assert safe_id("ns:train") == "ns:train" and safe_id("a/b c") == "a-b-c" and safe_id("") == "x"
    assert safe_id("_w") == "x_w"
    long = safe_id("n" * 63 + ":" + "x" * 40)
    assert len(long) <= 64 and long != safe_id("n" * 63 + ":" + "y" * 40)


def test_pod_utilization_is_each_pods_mean_over_devices_and_steps() -> None:
    series = (SeriesKey("u", "ns", "a", "h/0"), SeriesKey("u", "ns", "a", "h/1"), SeriesKey("u", "ns", "b", "h/2"))
    batch = TelemetryBatch(series, np.array([0, 0, 1, 2, 2], dtype=np.int32), np.arange(5, dtype=np.int64),
                           np.array([0.2, 0.4, 0.9, np.nan, 0.3]))  # fmt: skip
    assert pod_utilization(batch) == {("ns", "a"): (0.2 + 0.4 + 0.9) / 3, ("ns", "b"): 0.3}


def test_the_loop_keeps_an_hour_it_could_not_write_and_tries_again() -> None:
    obs = Observation(T0, (_node("e", "us-east-1", "on-demand"),), (_pod("t-0", "e", 8, owner_name="train"),))
    pools = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}
    written: list[list[dict[str, object]]] = []
    up = [False]

    def util(t0: int, t1: int, step: int) -> TelemetryBatch:
        if not up[0]:
            raise RuntimeError("prometheus down")
        return TelemetryBatch((SeriesKey("u", "ns", "t-0", "h/0"),), np.zeros(1, dtype=np.int32),
                              np.array([t0], dtype=np.int64), np.array([0.75]))  # fmt: skip

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        written.append(list(records))
        return len(written[-1]), []

    loop = MeterLoop("prod", lambda: (["h100_80gb"], pools), util, sink, every_s=60, util_delay_s=120)
    for k in range(H // 60 + 4):  # one hour and four minutes, a reading a minute
        loop.step(T0 + 60 * k, lambda: obs)
    assert written == [] and loop.failures and loop.meter.waiting()[0] == T0  # kept
    up[0] = True
    (done,) = loop.step(T0 + H + 300, lambda: obs)
    assert done.start_s == T0 and done.records == 1
    (rec,) = written[0]
    assert rec["gpus_allocated"] == 8.0 and rec["gpu_util"] == 0.75 and rec["bucket_start_s"] == T0


def test_without_prometheus_every_record_is_written_with_its_utilization_not_measured() -> None:
    obs = Observation(T0, (_node("e", "us-east-1", "on-demand"),), (_pod("t-0", "e", 8, owner_name="train"),))
    pools = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}
    written: list[dict[str, object]] = []

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    loop = MeterLoop("prod", lambda: (["h100_80gb"], pools), None, sink, every_s=60, util_delay_s=120)
    done = [h for k in range(H // 60 + 3) for h in loop.step(T0 + 60 * k, lambda: obs)]
    assert [(h.start_s, h.records, h.util_unmeasured_gpu_h) for h in done] == [(T0, 1, 8.0)] and not loop.failures
    (rec,) = written
    assert (rec["workload_id"], rec["gpus_allocated"], rec["gpu_util"]) == ("ns:train", 8.0, None)
    assert rec["pool_id"] == "aws/us-east-1/h100_80gb/on_demand"


def test_a_store_that_does_not_answer_costs_readings_not_the_controller() -> None:
    """The pools are read again every ten minutes; when the store does not answer the last read serves, and before
    any read the reading is skipped (nothing raises into the controller's loop)."""
    obs = Observation(T0, (_node("e", "us-east-1", "on-demand"),), (_pod("t-0", "e", 8),))
    pools = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}
    up = [False]

    def read() -> tuple[list[str], dict[tuple[str, str, str], str]]:
        if not up[0]:
            raise OSError("store down")
        return ["h100_80gb"], pools

    loop = MeterLoop("prod", read, lambda *a: TelemetryBatch((), np.zeros(0, np.int32), np.zeros(0, np.int64),
                                                             np.zeros(0)), lambda r: (0, []), every_s=60)  # fmt: skip
    assert loop.step(T0, lambda: obs) == [] and loop.meter.waiting() == [] and len(loop.failures) == 1
    up[0] = True
    loop.step(T0 + 60, lambda: obs)
    up[0] = False
    for k in range(2, 30):  # the store goes down again: the pools read at T0 + 60 serve
        loop.step(T0 + 60 * k, lambda: obs)
    (hour,) = loop.meter.closed(T0 + H)
    assert hour.covered_s == 60 * 28 and hour.pod_gpu_s[("ns", "t-0")][1] == 8 * 60 * 28
    # one failed read at T0; from T0 + 660 (ten minutes after the read) one at every reading, 19 of them
    assert len(loop.failures) == 20
