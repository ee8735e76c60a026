"""A fake of the Cloud Billing Catalog API's SKU list (``GET /v1/services/{service}/skus``), on loopback HTTP, checked
against Google's own discovery document (cloudbilling.v1.json, shipped in google-api-python-client).

Every request's query parameters are checked against the method's (and the API's global) parameters, every answer
against ``ListSkusResponse``: a broken request is kept in ``violations`` and answered 400, a broken answer 500 (the
fake's own bug). Pages: at most ``pageSize`` SKUs each (the request's, default 5000) and at most :attr:`FakeBilling.page_size`
(Google may answer fewer than asked), the next page
named by an opaque ``nextPageToken`` (none on the last page; an unknown token is Google's 400 INVALID_ARGUMENT, not a
violation). The fake holds USD prices only: a ``currencyCode`` other than USD is answered 400.

Every price here is INVENTED for the tests (``add_sku``'s callers); no real Google price list is available offline,
and none of these figures is Google's.

Faults for tests: ``throttle_next(n)`` (429), ``garble_next(fn)`` (the next answer's JSON changed by ``fn`` after the
check, to serve what Google does not document: a hostile answer, not a violation), ``loop_pages()`` (every page names
the same ``nextPageToken``).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import googleapiclient

from tests import loopback
from tests.integration.gcp.fake_gcp import validate, validate_query

DISCOVERY: dict[str, Any] = json.loads(
    (Path(googleapiclient.__file__).parent / "discovery_cache/documents/cloudbilling.v1.json").read_text()
)
SCHEMAS: dict[str, Any] = DISCOVERY["schemas"]
METHOD: dict[str, Any] = DISCOVERY["resources"]["services"]["resources"]["skus"]["methods"]["list"]
COMPUTE = "6F81-5844-456A"  # Compute Engine's service id
ROUTE = re.compile(r"/v1/services/(?P<service>[^/]+)/skus")
STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL"}
UNIT_DESCRIPTIONS = {"h": "hour", "GiBy.h": "gibibyte hour", "GBy.h": "gigabyte hour", "GiBy.mo": "gibibyte month"}
Res = dict[str, Any]


def money(usd: str | Decimal) -> Res:
    """``Money`` of a decimal amount (units as an int64 string, nanos as an int32, the same sign)."""
    d = Decimal(usd)
    units = int(d)
    nanos = int((d - units) * 1_000_000_000)
    return {"currencyCode": "USD", "units": str(units), "nanos": nanos}


def pricing(usd: str | Decimal, unit: str = "h", *, effective: str = "2025-12-31T08:00:00Z") -> Res:
    """One ``PricingInfo``: a single tier from 0 at ``usd`` per ``unit``, effective from ``effective``."""
    base = {"h": ("s", "second", 3600), "GiBy.h": ("By.s", "byte-second", 3600 * 2**30)}.get(unit, ("", "", 1))
    expression = {
        "usageUnit": unit,
        "usageUnitDescription": UNIT_DESCRIPTIONS.get(unit, unit),
        "baseUnit": base[0],
        "baseUnitDescription": base[1],
        "baseUnitConversionFactor": base[2],
        "displayQuantity": 1,
        "tieredRates": [{"startUsageAmount": 0, "unitPrice": money(usd)}],
    }
    return {"summary": "", "pricingExpression": expression, "currencyConversionRate": 1, "effectiveTime": effective}


class GoogleError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    def body(self) -> Res:
        return {"error": {"code": self.code, "message": self.message, "status": STATUS[self.code]}}


class FakeBilling:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.requests: list[dict[str, str]] = []  # each request's query
        self.violations: list[str] = []
        self.skus: list[Res] = []
        self.page_size = 5000
        self.throttles = 0
        self.garbles: list[Callable[[Res], object]] = []
        self.looping = False
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ---- the catalog ----------------------------------------------------------------------------------------------
    def add_sku(
        self,
        description: str,
        usd: str,
        *,
        usage_type: str = "OnDemand",
        regions: tuple[str, ...] = ("us-central1", "us-east4"),
        unit: str = "h",
        group: str = "GPU",
        pricing_info: list[Res] | None = None,
    ) -> Res:
        """A Compute Engine SKU priced ``usd`` (INVENTED) per ``unit`` in ``regions``; returns it (tests may edit it)."""
        n = next(self._ids)
        sku_id = f"FA{n:02X}-{n * 7919 % 65536:04X}-{n * 104729 % 65536:04X}"
        geo = {"type": "REGIONAL" if len(regions) == 1 else "MULTI_REGIONAL", "regions": list(regions)}
        sku: Res = {
            "name": f"services/{COMPUTE}/skus/{sku_id}",
            "skuId": sku_id,
            "description": description,
            "category": {
                "serviceDisplayName": "Compute Engine",
                "resourceFamily": "Compute",
                "resourceGroup": group,
                "usageType": usage_type,
            },
            "serviceRegions": list(regions),
            "pricingInfo": pricing_info if pricing_info is not None else [pricing(usd, unit)],
            "serviceProviderName": "Google",
            "geoTaxonomy": geo,
        }
        with self.lock:
            self.skus.append(sku)
        return sku

    # ---- test controls --------------------------------------------------------------------------------------------
    def throttle_next(self, times: int = 1) -> None:
        self.throttles += times

    def garble_next(self, fn: Callable[[Res], object]) -> None:
        self.garbles.append(fn)

    def loop_pages(self) -> None:
        self.looping = True

    def reset(self) -> None:
        with self.lock:
            for c in (self.calls, self.requests, self.violations, self.skus, self.garbles):
                c.clear()
            self.page_size, self.throttles, self.looping = 5000, 0, False

    # ---- server ---------------------------------------------------------------------------------------------------
    def start(self) -> FakeBilling:
        self._server, self.url = loopback.serve_json(self.handle)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    def handle(self, verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Res, float]:
        u = urlsplit(target)
        hit = ROUTE.fullmatch(u.path)
        with self.lock:
            if verb != "GET" or hit is None:
                self.violations.append(f"unknown method: {verb} {u.path}")
                return 404, GoogleError(404, f"unknown method: {verb} {u.path}").body(), 0.0
            query = parse_qsl(u.query, keep_blank_values=True)
            self.calls["skus.list"] += 1
            self.requests.append(dict(query))
            if not re.fullmatch(r"Bearer \S+", auth or ""):
                return 401, GoogleError(401, "Request is missing required authentication credential.").body(), 0.0
            probs = validate_query(METHOD, "skus.list", query, discovery=DISCOVERY)
            if raw.strip():
                probs.append(f"skus.list: takes no request body, got {raw[:80]!r}")
            if probs:
                self.violations += probs
                return 400, GoogleError(400, "; ".join(probs)).body(), 0.0
            if self.throttles > 0:
                self.throttles -= 1
                return 429, GoogleError(429, "Quota exceeded for quota metric 'Read requests'.").body(), 0.0
            try:
                out = self._list(hit["service"], dict(query))
            except GoogleError as err:
                return err.code, err.body(), 0.0
            probs = validate(out, "ListSkusResponse", "skus.list response", response=True, schemas=SCHEMAS)
            if probs:
                self.violations += probs
                return 500, GoogleError(500, "; ".join(probs)).body(), 0.0
            out = json.loads(json.dumps(out))  # a copy: answered outside the lock
            if self.garbles:
                self.garbles.pop(0)(out)
            return 200, out, 0.0

    def _list(self, service: str, q: dict[str, str]) -> Res:
        if service != COMPUTE:
            raise GoogleError(404, f"Service services/{service} not found.")
        if q.get("currencyCode", "USD") != "USD":
            raise GoogleError(400, "the fake holds USD prices only")
        size = min(int(q.get("pageSize") or 5000) or 5000, self.page_size)  # a page size is a request, not a promise
        start, token = 0, q.get("pageToken")
        if token:
            if not re.fullmatch(r"p[0-9]+x", token):
                raise GoogleError(400, "Invalid page token.")
            start = int(token[1:-1])
        page = self.skus[start : start + size]
        out: Res = {"skus": page, "nextPageToken": ""}
        if self.looping:
            out["nextPageToken"] = "p0x"
        elif start + size < len(self.skus):
            out["nextPageToken"] = f"p{start + size}x"
        return out
