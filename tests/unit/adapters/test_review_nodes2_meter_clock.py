"""Review (nodes2): the usage meter (adapters/kubernetes/usage.py) when the wall clock is stepped back."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from gpufleet.adapters.kubernetes.usage import MeterLoop
from gpufleet.control.observation import Observation
from tests.unit.adapters.test_usage_meter import T0, H, _node, _pod

STEP_BACK_S = 1200


def test_gpu_time_held_while_the_wall_clock_is_behind_is_not_lost() -> None:
    """Review (fixed), the defect: a reading whose wall time is not after the meter's last one is dropped (``UsageMeter.observe``:
    "or the clock went back"), and the reading cadence pauses for the size of the step (``MeterLoop.read``). A wall
    clock stepped back 20 minutes (NTP correcting a clock that ran ahead, a VM resumed) loses 20 minutes of every
    pod's GPUs from the books: 8 GPUs held for 3 hours 20 minutes of real time were written as 24 GPU-hours. The
    meter now counts the time held on the controller's steady clock (``MeterLoop(steady=...)``)."""
    real = [float(T0)]  # the steady clock (the controller's time.monotonic)
    obs = Observation(T0, (_node("e", "us-east-1", "on-demand"),), (_pod("t-0", "e", 8, owner_name="train"),))
    pools = {("us-east-1", "h100_80gb", "on_demand"): "aws/us-east-1/h100_80gb/on_demand"}
    written: list[dict[str, object]] = []

    def sink(records: Sequence[dict[str, object]]) -> tuple[int, list[str]]:
        written.extend(records)
        return len(records), []

    loop = MeterLoop(
        "prod", lambda: (["h100_80gb"], pools), None, sink, every_s=60, util_delay_s=120, steady=lambda: real[0]
    )
    for k in range(4 * H // 60):  # a reading a minute of real time; at 30 minutes the wall clock goes back 20
        real[0] = T0 + 60.0 * k
        loop.step(real[0] - (STEP_BACK_S if 60 * k >= H // 2 else 0), lambda: obs)
    hours = sorted({int(str(r["bucket_start_s"])) for r in written})
    assert hours == [T0, T0 + H, T0 + 2 * H]
    gpu_h = sum(float(str(r["gpus_allocated"])) for r in written)
    assert gpu_h == pytest.approx(8 * (3 + STEP_BACK_S / H))  # the three wall hours held 3 h 20 min of real time
