"""The forecast-led procurer's node count: bisection over the candidate levels gives what testing every level gives
(an hour's saving never grows with the reserved level, so "worth it" holds for a prefix of the levels)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.control.forecast_led import marginal_saving_usd, worthwhile_nodes


def _exhaustive(cover: np.ndarray, levels: np.ndarray, first: int, **kw: float | np.ndarray) -> int:
    save = marginal_saving_usd(cover, levels, **kw)  # type: ignore[arg-type]
    worth = (save.sum(axis=1) > 0) & (save[:, :first].sum(axis=1) > 0)
    return int(np.argmin(worth)) if not worth.all() else len(worth)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    hours=st.integers(1, 400),
    per=st.sampled_from([1, 4, 8]),
    have=st.integers(0, 64),
    spot_share=st.floats(0.0, 1.0),
    secondary=st.floats(0.0, 100.0),
    reserved=st.floats(0.5, 5.0),
    first=st.integers(1, 200),
)
def test_bisection_finds_the_same_node_count_as_testing_every_level(
    seed: int, hours: int, per: int, have: int, spot_share: float, secondary: float, reserved: float, first: int
) -> None:
    rng = np.random.default_rng(seed)
    cover = rng.gamma(2.0, 40.0, size=hours) * (1 + 0.5 * np.sin(np.arange(hours) / 12.0))
    top = max(0, int(np.ceil((cover.max() - have) / per)))
    levels = have + per * np.arange(top, dtype=np.float64) + per / 2
    kw = dict(
        spot_gpus=np.minimum(spot_share * cover, 50.0),
        secondary_gpus=secondary,
        reserved=reserved,
        spot=float(rng.uniform(0.5, 3.0)),
        secondary=float(rng.uniform(1.0, 6.0)),
        on_demand=float(rng.uniform(3.0, 8.0)),
    )
    assert worthwhile_nodes(cover, levels, first, **kw) == _exhaustive(cover, levels, first, **kw)  # type: ignore[arg-type]
