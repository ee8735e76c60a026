"""`bench loop`'s statistics: the 95 % confidence interval of the mean per-seed cost ratio, and the targets that
carry it next to the ratio of means."""

from __future__ import annotations

import math
import statistics

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.bench.loop import aggregate, mean_ci95


def test_the_interval_is_students_t_around_the_mean() -> None:
    lo, hi = mean_ci95([1.0, 2.0, 3.0])  # type: ignore[misc]
    half = 4.302653 / math.sqrt(3)  # t(0.975, 2 df) x sd 1 / sqrt(3)
    assert math.isclose(lo, 2.0 - half, abs_tol=1e-4) and math.isclose(hi, 2.0 + half, abs_tol=1e-4)
    assert mean_ci95([0.9]) is None and mean_ci95([]) is None


@given(st.lists(st.floats(0.3, 2.0), min_size=2, max_size=30))
def test_the_interval_holds_the_mean_and_closes_when_the_seeds_agree(xs: list[float]) -> None:
    got = mean_ci95(xs)
    assert got is not None
    lo, hi = got
    m = statistics.fmean(xs)
    assert lo - 1e-4 <= m <= hi + 1e-4
    same = mean_ci95([xs[0]] * len(xs))
    assert same is not None and math.isclose(same[0], same[1], abs_tol=2e-4)


def _row(seed: int, g: float, cp: float) -> dict[str, object]:
    def loop(cost: float, to_cp: float) -> dict[str, float]:
        return {"total_cost_usd": cost, "gpu_utilization": 0.8, "p95_queue_wait_s": 300.0,
                "serving_slo_attainment": 0.9999, "node_launches": 10.0, "idle_cost_usd": 0.0,
                "lost_gpu_hours": 0.0, "backlog_gpu_hours": 0.0, "work_equal_cost_usd": cost,
                "ratio_to_bound": 1.5, "ratio_work_equal_to_bound": 1.5,
                "ratio_to_common_practice": to_cp, "ratio_to_baseline": 1.0}  # fmt: skip

    return {"seed": seed, "bound_usd": 1.0, "loops": {"gpufleet": loop(g, g / cp), "common_practice": loop(cp, 1.0)}}


def test_the_targets_carry_the_per_seed_interval_beside_the_ratio_of_means() -> None:
    rows = [_row(1, 80.0, 100.0), _row(2, 90.0, 100.0), _row(3, 170.0, 200.0)]
    tg = aggregate(rows)["targets"]["common_practice"]
    assert tg["cost_ratio_of_means"] == round(340 / 400, 4)
    assert math.isclose(tg["cost_ratio_per_seed_mean"], (0.8 + 0.9 + 0.85) / 3, abs_tol=1e-6)
    lo, hi = tg["cost_ratio_per_seed_ci95"]
    assert lo < 0.85 < hi and hi - lo < 0.3
