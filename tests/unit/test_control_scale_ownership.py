"""control/scale_ownership.py: who owns a Deployment's replicas (pure decisions, no Kubernetes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.observation import DeclaredServing, ObservedDeployment
from gpufleet.control.replicas import ScaleDecision
from gpufleet.control.scale_ownership import (
    HOLD_MAX_S,
    HOLD_S,
    HPA_MANAGES,
    NO_WAKE_SIGNAL,
    NOT_MANAGED,
    SCALED_BY_OTHER,
    HandsOff,
    ScaleOwnership,
    hold_s,
    left_alone,
    wake_floor,
)
from gpufleet.domain.workloads import ServingScaling

FLEET = ServingScaling(min_replicas=0, max_replicas=8, target_rps_per_replica=5.0)


def _dep(name: str, replicas: int, *, managed: bool = True, serving: bool = True) -> ObservedDeployment:
    declared = DeclaredServing(FLEET, managed=managed) if serving else None
    return ObservedDeployment("ns", name, replicas, replicas, "serving", serving=declared)


def test_not_managed_and_hpa_targeted_deployments_are_left_alone_in_order() -> None:
    deps = [_dep("a", 1), _dep("b", 1, managed=False), _dep("c", 1), _dep("d", 1, serving=False), _dep("e", 1)]
    kept, off = left_alone(deps, {("ns", "c"): "c-hpa", ("ns", "d"): "d-hpa", ("other", "a"): "x"})
    assert [d.name for d in kept] == ["a", "d", "e"]  # d declares no serving: not gpufleet's to leave alone
    assert off == [HandsOff("ns", "b", NOT_MANAGED), HandsOff("ns", "c", HPA_MANAGES, {"hpa": "c-hpa"})]
    assert off[1].target == "ns/c"


def test_someone_elses_scale_is_held_and_audited_with_what_gpufleet_wrote() -> None:
    own = ScaleOwnership()
    own.wrote_replicas("ns", "llm", 6)
    got = own.held([_dep("llm", 2)], 100.0, period=True)
    assert got.keys == {("ns", "llm")}
    facts: dict[str, object] = {"wrote": 6, "replicas_now": 2, "held_until": 700.0}
    assert got.audit == [HandsOff("ns", "llm", SCALED_BY_OTHER, facts)]
    assert ("ns", "llm") not in own.wrote  # until gpufleet writes again
    later = own.held([_dep("llm", 2)], 400.0, period=True)  # still held: audited without ``wrote``
    assert later.keys == {("ns", "llm")}
    assert later.audit == [HandsOff("ns", "llm", SCALED_BY_OTHER, {"replicas_now": 2, "held_until": 700.0})]
    assert own.held([_dep("llm", 2)], 700.0, period=True).keys == set()  # the hold ends at its instant
    assert own.held_until(("ns", "llm")) is None


def test_the_fast_path_neither_detects_nor_audits_but_respects_a_hold() -> None:
    """Review (fixed), the defect: the fast path (scale-up on queue growth, between periods) did not look at
    gpufleet's last write, so it scaled up over someone's scale-down, and its own write then hid the change from
    the period (no ``scaled_by_other``, no hold). Now it leaves such a Deployment alone, without a hold or a record;
    the period detects and audits it."""
    own = ScaleOwnership()
    own.wrote_replicas("ns", "llm", 6)
    fast = own.held([_dep("llm", 2)], 100.0, period=False)
    assert fast.keys == {("ns", "llm")} and fast.audit == [] and own.wrote == {("ns", "llm"): 6}
    assert own.held([_dep("llm", 6)], 105.0, period=False).keys == set()  # its own write standing: free to act
    own.held([_dep("llm", 2)], 110.0, period=True)
    fast = own.held([_dep("llm", 2)], 120.0, period=False)
    assert fast.keys == {("ns", "llm")} and fast.audit == []


def test_strikes_double_the_hold_up_to_the_cap_and_reset_when_gpufleets_write_stands() -> None:
    own, key, now = ScaleOwnership(), ("ns", "llm"), 0.0
    holds = []
    for _ in range(6):  # a writer that resets the Deployment each time gpufleet writes once the hold ends
        own.wrote_replicas("ns", "llm", 6)
        own.held([_dep("llm", 2)], now, period=True)
        until = own.held_until(key)
        assert until is not None
        holds.append(until - now)
        now = until
    assert holds == [600.0, 1200.0, 2400.0, 3600.0, 3600.0, 3600.0]
    assert own.strikes(key) == 6
    own.wrote_replicas("ns", "llm", 6)
    assert own.held([_dep("llm", 6)], now, period=True).keys == set()  # gpufleet's write stood a period
    assert own.strikes(key) == 0
    own.held([_dep("llm", 2)], now + 30, period=True)
    assert own.held_until(key) == now + 30 + HOLD_S  # back to the first hold


@given(st.integers(min_value=0, max_value=64))
def test_hold_s_doubles_per_strike_up_to_the_cap(strikes: int) -> None:
    assert HOLD_S <= hold_s(strikes) <= HOLD_MAX_S
    assert hold_s(strikes) == min(HOLD_S * 2**strikes, HOLD_MAX_S)
    assert hold_s(strikes + 1) == min(2 * hold_s(strikes), HOLD_MAX_S)


STEP = st.tuples(
    st.floats(min_value=0.0, max_value=2000.0, allow_nan=False),  # time to the step
    st.sampled_from(["gpufleet_writes", "someone_scales", "nothing"]),
    st.booleans(),  # a period (else the fast path)
)


@settings(max_examples=150, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e9, allow_nan=False), st.lists(STEP, max_size=30))
def test_a_hold_never_ends_before_now_plus_hold_s_and_lasts_its_strikes_length(
    start: float, steps: list[tuple[float, str, bool]]
) -> None:
    own, key, now, replicas = ScaleOwnership(), ("ns", "llm"), start, 3
    held_until: float | None = None  # the latest hold a detection set
    for dt, action, period in steps:
        now += dt
        if action == "gpufleet_writes":
            replicas += 1
            own.wrote_replicas("ns", "llm", replicas)
        elif action == "someone_scales":
            replicas = replicas + 1 if replicas < 8 else 1
        strikes = own.strikes(key)
        got = own.held([_dep("llm", replicas)], now, period=period)
        if not period:
            assert got.audit == []
        detected = [h for h in got.audit if "wrote" in h.extra]
        if detected:
            until = own.held_until(key)
            assert until is not None and until >= now + HOLD_S  # never before now + 600 s
            assert until == now + hold_s(strikes) and until <= now + HOLD_MAX_S
            assert detected[0].extra["held_until"] == round(until, 3)
            assert own.strikes(key) == strikes + 1
            held_until = until
        if held_until is not None and now < held_until:
            assert key in got.keys, "a hold ended early"
        if key in got.keys:
            assert all(h.reason == SCALED_BY_OTHER for h in got.audit)


def _decision(desired: int) -> ScaleDecision:
    return ScaleDecision("ns", "llm", current=2, desired=desired, reason="scale_to_zero")


def test_a_zero_is_lifted_to_one_only_when_the_rate_is_read_from_its_own_pods() -> None:
    assert wake_floor(_decision(0), True, 8) == ScaleDecision("ns", "llm", 2, 1, NO_WAKE_SIGNAL)
    assert wake_floor(_decision(0), False, 8) == _decision(0)  # a gateway's counter outlives the pods
    assert wake_floor(_decision(3), True, 8) == _decision(3)
    assert wake_floor(_decision(0), True, 0) == ScaleDecision("ns", "llm", 2, 0, NO_WAKE_SIGNAL)  # max 0 caps it
