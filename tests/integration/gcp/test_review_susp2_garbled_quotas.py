"""Review (susp2): Cloud Quotas answers that are garbled (a proxy, an API change): a ``details.value`` that is not an
integer, rows that are not objects, missing fields. The outlook must answer (the stored quota applies to that pool:
no reading), never 500, and never read a missing value as a quota of 0."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gpufleet.adapters.gcp.quotas import FAMILY_QUOTA
from tests.integration.conftest import NOW_S
from tests.integration.gcp.conftest import Start
from tests.integration.gcp.fake_quotas import FakeQuotas
from tests.integration.gcp.test_gcp_quotas import REGION, _seed
from tests.integration.test_api_planning import DAY, SKU, _hourly, _ingest

Info = dict[str, Any]


def _h100_row(info: Info) -> Info:
    return next(r for r in info["dimensionsInfos"] if (r.get("dimensions") or {}).get("gpu_family") == "NVIDIA_H100")


def _value(v: object) -> Callable[[Info], None]:
    def garble(info: Info) -> None:
        _h100_row(info)["details"]["value"] = v

    return garble


def _no_details(info: Info) -> None:
    del _h100_row(info)["details"]


def _row_not_object(info: Info) -> None:
    info["dimensionsInfos"].append("NVIDIA_H100=64")


def _rows_not_list(info: Info) -> None:
    info["dimensionsInfos"] = {"NVIDIA_H100": 64}


def _dimensions_not_object(info: Info) -> None:
    _h100_row(info)["dimensions"] = ["gpu_family", "NVIDIA_H100"]


class _Garble(httpx.BaseTransport):
    """Forwards every call to the fake; the family quota's quotaInfos answer is changed by ``garble``."""

    def __init__(self, garble: Callable[[Info], None]) -> None:
        self._inner = httpx.HTTPTransport()
        self._garble = garble

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._inner.handle_request(request)
        if request.method == "GET" and request.url.path.endswith(f"/quotaInfos/{FAMILY_QUOTA}"):
            info = json.loads(response.read())
            self._garble(info)
            return httpx.Response(response.status_code, json=info)
        return response


GARBLES = {
    "value-word": _value("lots"),
    "value-fraction": _value("16.5"),
    "value-null": _value(None),
    "value-bool": _value(True),
    "no-details": _no_details,
    "row-not-object": _row_not_object,
    "rows-not-list": _rows_not_list,
    "dimensions-not-object": _dimensions_not_object,
}


@pytest.mark.parametrize("garble", list(GARBLES.values()), ids=list(GARBLES))
def test_a_garbled_quota_answer_is_no_reading(
    quota_server: Start, fake_quotas: FakeQuotas, garble: Callable[[Info], None]
) -> None:
    """Review (fixed), the defect: ``_row_value`` does ``int(details.get("value", 0))`` and ``row.get`` / ``dims.items()`` on whatever
    the answer holds: a value that is not an integer, a row or dimensions that are not objects raise ValueError /
    AttributeError outside the port's errors (GET /v1/quotas/outlook answers 500), and a row without its value reads
    as a quota of 0 GPUs, exhausted now. Now that quota gives no reading (logged); the stored quota (4) applies, the others are still read."""
    _seed(fake_quotas)
    server = quota_server()
    api = server.services.cloud_quotas._source._api  # type: ignore[attr-defined]
    api._http = httpx.Client(base_url=api._http.base_url, timeout=api._http.timeout, transport=_Garble(garble))
    _ingest(server, _hourly(NOW_S - 28 * DAY, 28, 6.0))
    with server.client("viewer", "vic") as v:
        r = v.get("/v1/quotas/outlook", params={"sku": SKU, "days": 60})
        listed = v.get("/v1/quotas", params={"region": REGION})
    assert r.status_code == 200, r.text
    pool = next(p for p in r.json()["pools"] if p["pool"] == f"gcp/{REGION}/{SKU}/on_demand")
    assert (pool["quota_source"], pool["quota_gpus"]) == ("stored", 4)
    spot = next(p for p in r.json()["pools"] if p["pool"] == f"gcp/{REGION}/{SKU}/spot")
    assert (spot["quota_source"], spot["quota_gpus"]) == ("cloud_quotas", 8)  # the other quotas are still read
    assert listed.status_code == 200, listed.text
