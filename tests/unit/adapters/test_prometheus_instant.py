"""PrometheusTelemetry.sum_at against answers a real server gives and a hostile or broken one could give (the
happy path against a real Prometheus: tests/integration/k8s/test_replica_scaling.py)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gpufleet.adapters.telemetry_prometheus import PrometheusTelemetry, TelemetryUnavailable


def _prom(status: int, body: Any) -> PrometheusTelemetry:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query" and request.url.params["time"] == "100.0"
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return PrometheusTelemetry("http://prom", transport=httpx.MockTransport(handler))


def _vector(*values: str) -> dict[str, Any]:
    result = [{"metric": {"pod": f"p{i}"}, "value": [100.0, v]} for i, v in enumerate(values)]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_the_series_are_summed_and_no_series_is_no_data_not_zero() -> None:
    assert _prom(200, _vector("12.5", "7.5")).sum_at("q", 100.0) == 20.0
    assert _prom(200, _vector()).sum_at("q", 100.0) is None


@pytest.mark.parametrize(
    ("status", "body", "match"),
    [
        (200, _vector("NaN"), "finite"),
        (200, _vector("-3"), "finite"),
        (200, {"status": "success", "data": {"resultType": "vector", "result": [{"value": "x"}]}}, "malformed"),
        (200, {"status": "success", "data": {"resultType": "matrix", "result": []}}, "vector"),
        (400, {"status": "error", "error": "parse error"}, "parse error"),
        (502, "<html>bad gateway</html>", "non-JSON"),
    ],
)
def test_a_broken_answer_is_a_clear_error_never_a_rate(status: int, body: Any, match: str) -> None:
    with pytest.raises(TelemetryUnavailable, match=match):
        _prom(status, body).sum_at("q", 100.0)


def _range_prom(body: Any, asked: list[dict[str, str]]) -> PrometheusTelemetry:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/query_range"
        asked.append(dict(request.url.params))
        return httpx.Response(200, json=body)

    return PrometheusTelemetry("http://prom", transport=httpx.MockTransport(handler))


def _matrix(*series: list[tuple[float, str]]) -> dict[str, Any]:
    result = [{"metric": {"pod": f"p{i}"}, "values": [[t, v] for t, v in s]} for i, s in enumerate(series)]
    return {"status": "success", "data": {"resultType": "matrix", "result": result}}


def test_a_range_is_summed_per_step_and_a_long_one_keeps_its_latest_steps() -> None:
    asked: list[dict[str, str]] = []
    body = _matrix([(60.0, "1"), (120.0, "2")], [(120.0, "3"), (180.0, "4")])  # a pod gone, a pod new
    assert _range_prom(body, asked).sum_range("q", 0, 180, 60) == [(60.0, 1.0), (120.0, 5.0), (180.0, 4.0)]
    _range_prom(_matrix(), asked).sum_range("q", 0, 10**8, 60)
    assert int(asked[-1]["end"]) - int(asked[-1]["start"]) == 60 * 9_999  # at most MAX_POINTS steps


@pytest.mark.parametrize(("value", "match"), [("NaN", "finite"), ("-1", "finite"), ("x", "malformed")])
def test_a_broken_range_is_a_clear_error_never_a_history(value: str, match: str) -> None:
    with pytest.raises(TelemetryUnavailable, match=match):
        _range_prom(_matrix([(60.0, "1"), (120.0, value)]), []).sum_range("q", 0, 120, 60)
