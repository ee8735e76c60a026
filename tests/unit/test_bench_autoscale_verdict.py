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
