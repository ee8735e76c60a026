"""A fake of Azure's Retail Prices API (``GET /api/retail/prices``, public, no credentials) on loopback HTTP.

No SDK describes this API, so the fake checks what Microsoft's documentation of it states: the answer's envelope
(``BillingCurrency``, ``CustomerEntityId``, ``CustomerEntityType``, ``Items``, ``NextPageLink``, ``Count``) and each
item's fields and JSON types (:data:`ITEM`, from the documented example answer); the query: ``$filter`` of
``field eq 'value'`` terms joined by ``and`` on the documented filterable fields (values compared case-sensitively, as
since the 2023-01-01-preview version), ``$skip``, ``api-version``, ``currencyCode``, ``meterRegion``. Anything
else is a violation (answered 400); the fake's own answers are checked too. Pages hold ``page_size`` items (100, as
Azure's), the next one named by ``NextPageLink`` with ``$skip``. Test controls: ``add(**item)`` (a VM price, the
other fields defaulted), ``throttle_next()`` (429 with ``Retry-After: 1``); ``calls`` counts requests.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from tests import loopback

PATH = "/api/retail/prices"
ITEM: dict[str, tuple[type, ...]] = {
    "currencyCode": (str,), "tierMinimumUnits": (int, float), "retailPrice": (int, float), "unitPrice": (int, float),
    "armRegionName": (str,), "location": (str,), "effectiveStartDate": (str,), "meterId": (str,),
    "meterName": (str,), "productId": (str,), "skuId": (str,), "availabilityId": (str, type(None)),
    "productName": (str,), "skuName": (str,), "serviceName": (str,), "serviceId": (str,), "serviceFamily": (str,),
    "unitOfMeasure": (str,), "type": (str,), "isPrimaryMeterRegion": (bool,), "armSkuName": (str,),
}  # fmt: skip
FILTERABLE = {
    "armRegionName", "location", "meterId", "meterName", "productId", "skuId", "productName", "skuName", "serviceName",
    "serviceId", "serviceFamily", "priceType", "armSkuName", "currencyCode",
}  # fmt: skip
QUERY = {"$filter", "$skip", "api-version", "currencyCode", "meterRegion"}
TERM = re.compile(r"(\w+) eq '([^']*)'")
Res = dict[str, Any]


def problems(item: Res, where: str) -> list[str]:
    probs = [f"{where}.{k}: not a field of a retail price item" for k in item if k not in ITEM]
    for k, types in ITEM.items():
        if k not in item:
            probs.append(f"{where}.{k}: missing")
        elif not isinstance(item[k], types) or (isinstance(item[k], bool) and bool not in types):
            probs.append(f"{where}.{k}: {item[k]!r} is not of type {[t.__name__ for t in types]}")
    return probs


class FakeRetailPrices:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.items: list[Res] = []
        self.violations: list[str] = []
        self.calls: Counter[str] = Counter()
        self.throttles = 0
        self.page_size = 100
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def add(self, *, arm_sku: str, region: str, price: float, sku_name: str, product: str, kind: str = "Consumption",
            unit: str = "1 Hour", currency: str = "USD") -> None:  # fmt: skip
        with self.lock:
            n = len(self.items)
            self.items.append({
                "currencyCode": currency, "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
                "armRegionName": region, "location": region.upper(), "effectiveStartDate": "2026-10-01T00:00:00Z",
                "meterId": f"00000000-0000-0000-0000-{n:012d}", "meterName": sku_name, "productId": f"DZH318Z0{n:04d}",
                "skuId": f"DZH318Z0{n:04d}/00TG", "availabilityId": None, "productName": product, "skuName": sku_name,
                "serviceName": "Virtual Machines", "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute",
                "unitOfMeasure": unit, "type": kind, "isPrimaryMeterRegion": True, "armSkuName": arm_sku,
            })  # fmt: skip

    def throttle_next(self) -> None:
        self.throttles += 1

    def reset(self) -> None:
        with self.lock:
            self.items.clear()
            self.violations.clear()
            self.calls.clear()
            self.throttles, self.page_size = 0, 100

    def start(self) -> FakeRetailPrices:
        self._server, self.url = loopback.serve_json_headers(self.handle)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    def handle(self, verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Any, float, dict[str, str]]:
        u = urlsplit(target)
        with self.lock:
            self.calls[verb] += 1
            if verb != "GET" or u.path != PATH:
                self.violations.append(f"{verb} {u.path}: not the Retail Prices API")
                return 404, {"Error": {"Code": "NotFound", "Message": u.path}}, 0.0, {}
            if self.throttles:
                self.throttles -= 1
                return 429, {"Error": {"Code": "TooManyRequests", "Message": "slow down"}}, 0.0, {"Retry-After": "1"}
            query = dict(parse_qsl(u.query, keep_blank_values=True))
            try:
                terms = self._filter(query)
                skip = int(query.get("$skip", "0"))
            except ValueError as err:
                self.violations.append(str(err))
                return 400, {"Error": {"Code": "BadRequest", "Message": str(err)}}, 0.0, {}
            hits = [i for i in self.items if all(i["type" if k == "priceType" else k] == v for k, v in terms)]
            page = hits[skip : skip + self.page_size]
            nxt = None
            if skip + self.page_size < len(hits):
                nxt = f"{self.url}{PATH}?{urlencode({**query, '$skip': str(skip + self.page_size)})}"
            out = {"BillingCurrency": "USD", "CustomerEntityId": "Default", "CustomerEntityType": "Retail",
                   "Items": page, "NextPageLink": nxt, "Count": len(page)}  # fmt: skip
            probs = [p for n, i in enumerate(page) for p in problems(i, f"Items[{n}]")]
            if probs:
                self.violations += probs
                return 500, {"Error": {"Code": "FakeBug", "Message": "; ".join(probs)}}, 0.0, {}
            return 200, out, 0.0, {}

    def _filter(self, query: dict[str, str]) -> list[tuple[str, str]]:
        for k in query:
            if k not in QUERY:
                raise ValueError(f"unknown query parameter {k!r}")
        text = query.get("$filter", "")
        if not text:
            return []
        parts = text.split(" and ")
        terms = [TERM.fullmatch(p.strip()) for p in parts]
        if not all(terms):
            raise ValueError(f"$filter {text!r}: the fake reads only \"field eq 'value'\" terms joined by and")
        out = [(m.group(1), m.group(2)) for m in terms if m]
        for k, _ in out:
            if k not in FILTERABLE:
                raise ValueError(f"$filter: {k!r} is not a filterable field")
        return out
