"""Review (susp): an infinite demand value passed to the forecasting Python API (``forecast_demand``,
``check_history``, and ``control.forecasting.demand_quantiles``, which the capacity service calls)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufleet.control.forecasting import demand_quantiles
from gpufleet.domain.errors import ValidationError
from gpufleet.forecast.engine import check_history
from gpufleet.forecast.loop import forecast_demand


def _history(bad: float, at: int = 20) -> np.ndarray:
    y = np.full(28, 8.0)
    y[at] = bad
    return y


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
@pytest.mark.parametrize(
    "call",
    [
        check_history,
        lambda y: forecast_demand(y, 3),
        lambda y: demand_quantiles(y, 3),
        lambda y: demand_quantiles(y[-4:], 3),  # under the fitted model's minimum history: the baseline path
    ],
    ids=["check_history", "forecast_demand", "demand_quantiles", "demand_quantiles_short"],
)
def test_infinite_demand_is_refused_not_read_as_a_gap(call: object, bad: float) -> None:
    """Review (fixed), the defect: the history check keeps only the finite points as "known" (``np.isfinite``), so
    +inf (an overflowed counter, a division by a zero interval) was silently read as a missing value and the
    forecast served as if nothing were wrong (and -inf escaped the negative-demand check). NaN is the documented gap
    marker; an infinite demand is a bad input: refused with a ValidationError naming the history and the index."""
    y = _history(bad, at=25)
    with pytest.raises(ValidationError) as err:
        call(y)  # type: ignore[operator]
    assert err.value.field == "history" and "inf at index" in err.value.message


def test_nan_is_still_a_gap() -> None:
    """NaN keeps its documented meaning (a gap): the fix refuses infinities only."""
    y = _history(np.nan)
    assert np.isfinite(forecast_demand(y, 3).at(0.5)).all()
    assert check_history(y) is not None
