"""The replica-autoscaling bench's done-when line reads the right way round."""

from __future__ import annotations

from types import SimpleNamespace

from gpufleet.bench.autoscale import verdict


def _row(gpu_h: float, attainment: float) -> SimpleNamespace:
    return SimpleNamespace(gpu_hours=gpu_h, slo_attainment=attainment)


def test_the_verdict_says_more_when_gpufleet_spends_more_than_static_peak() -> None:
    """A dearer gpufleet is reported as "N% more GPU-h", not as a negative saving ("-50.9% fewer")."""
    dear = SimpleNamespace(results={"gpufleet": _row(6.3, 1.0), "static_peak": _row(4.2, 1.0)})
    ok, why = verdict(dear)  # type: ignore[arg-type]
    assert not ok and "50.0% more GPU-h than static_peak" in why
    cheap = SimpleNamespace(results={"gpufleet": _row(2.1, 1.0), "static_peak": _row(4.2, 1.0)})
    ok, why = verdict(cheap)  # type: ignore[arg-type]
    assert ok and "50.0% fewer GPU-h than static_peak" in why


def test_issue_21_verdict_binds_only_where_static_peak_reaches_99_and_only_rivals_that_do() -> None:
    from gpufleet.bench.generalize import autoscale_passes

    def rows(g: float, g_att: float, s_att: float = 1.0, hpa_att: float = 0.999) -> dict[str, dict[str, float]]:
        return {
            "gpufleet": {"gpu_hours": g, "slo_attainment": g_att},
            "static_peak": {"gpu_hours": 8.0, "slo_attainment": s_att},
            "hpa": {"gpu_hours": 6.0, "slo_attainment": hpa_att},
            "kpa": {"gpu_hours": 3.0, "slo_attainment": 0.5},
        }

    assert autoscale_passes(rows(5.0, 0.995))  # kpa is cheaper but misses 99 %: not a rival
    assert not autoscale_passes(rows(7.0, 0.995))  # dearer than hpa at 99.9 %
    assert autoscale_passes(rows(7.0, 0.995, hpa_att=0.98))  # hpa misses 99 %: only static peak binds
    assert not autoscale_passes(rows(5.0, 0.985))  # below 99 % where static peak reaches it
    assert autoscale_passes(rows(9.0, 0.9, s_att=0.98))  # static peak misses 99 %: no verdict binds
    assert not autoscale_passes(rows(5.0, 0.995), {"gpu_hours": 8.5, "slo_attainment": 1.0})  # a setting's row
