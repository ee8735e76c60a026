"""The gpufleet loop holds idle launched nodes with a relaunch's wait weighted 4 node starts (session 14)."""

from __future__ import annotations

from gpufleet.autoscale.nodes_payoff import LOOP_DELAY_WEIGHT, PayoffAwareNodes
from gpufleet.control.loop import ControlLoop
from gpufleet.ports import IdleNode


def _idle(tier: str, price: float, start_s: int = 600) -> IdleNode:
    return IdleNode(1, f"h100-{tier}", "h100_80gb", tier, 8, 0, 0, start_s, price)


def test_only_the_gpufleet_loop_uses_the_loop_weight() -> None:
    scaler = ControlLoop.gpufleet(1).node_scaler
    assert isinstance(scaler, PayoffAwareNodes)
    assert scaler.delay_weight == LOOP_DELAY_WEIGHT == 4.0
    assert scaler.count_needs  # holds capped by the recent need for fresh nodes (session 15)
    assert not isinstance(ControlLoop.baseline(1).node_scaler, PayoffAwareNodes)
    # bench cluster-autoscale measures PayoffAwareNodes.default(): the loop's scaler, the loop's weight
    assert PayoffAwareNodes.default().delay_weight == LOOP_DELAY_WEIGHT


def test_holds_at_the_loop_weight() -> None:
    scaler = PayoffAwareNodes.default()
    # on-demand: 600 s start + 4 x 600 s wait at its own price + 60 s minimum billing
    assert scaler.hold_s(_idle("on_demand", 6.88), 6.88) == 3060.0
    # spot at 1.25 $/GPU-h: the wait is priced at on-demand, 5.5 times its rent
    assert abs(scaler.hold_s(_idle("spot", 1.25), 6.88) - (600 + 4 * 600 * 6.88 / 1.25 + 60)) < 1e-9
