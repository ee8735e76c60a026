"""GCP's list prices (the cloud price port, ``adapters/price_port.py``) from the Cloud Billing Catalog API: Compute
Engine's public SKUs (``GET https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus?currencyCode=USD``,
every page followed by ``nextPageToken``), in USD per GPU-hour (the machine type's hourly price / its GPUs).

The rule. GCP bills an accelerator-optimized VM by its parts, each a SKU priced per hour in a region:
- A3 High (h100_80gb, a3-highgpu-8g), A3 Ultra (h200_141gb, a3-ultragpu-8g), A2 Ultra (a100_80gb, a2-ultragpu-8g) and
  G2 (l4, g2-standard-96): the GPU SKU x GPUs + the family's core SKU x vCPUs + its RAM SKU x GiB of memory
  (``machines.py`` holds the counts). GPU SKUs: "Nvidia H100 80GB GPU", "H200 141GB GPU", "Nvidia Tesla A100 80GB
  GPU", "Nvidia L4 GPU"; core and RAM SKUs "<family> Instance Core" / "<family> Instance Ram" with the family "A3",
  "A3 Ultra", "A2", "G2".
- A4 (b200, a4-highgpu-8g): the GPU is sold as a slice that bundles its share of the vCPUs and memory (there are no
  A4 core or RAM SKUs): "A4 Nvidia B200 (1 gpu slice)" x GPUs.
A SKU prices a part in a tier when its description is exactly the part's name then " running in <place>" with
``category.usageType`` ``OnDemand`` (on-demand), or, with usageType ``Preemptible`` (spot), "[Spot ]Preemptible <name>
running in <place>" or "<name> attached to [Spot ]Preemptible VMs running in <place>" (case and runs of blanks
aside), and when the region is one of its ``serviceRegions``. So a Mega/Plus GPU, a commitment, a reservation, a DWS
(flex-start) or a sole-tenancy SKU is never a part, nor is a SKU whose usageType and description disagree. The
descriptions are those third-party readers of the catalog show; they are not checked against Google's live catalog
here.

A SKU's price: of its ``pricingInfo``, the one with the latest ``effectiveTime`` (RFC 3339) not after ``now``; its
``pricingExpression`` in the part's unit (``h``; RAM ``GiBy.h``, or ``GBy.h`` converted at 2^30/10^9 GB per GiB) with
exactly one tier, from usage 0, whose ``unitPrice`` (``units`` an int64 as a string or a number, ``nanos`` an int32
of the same sign, below 10^9) is in USD and above zero, at a ``currencyConversionRate`` of 1 (when given). A SKU that
is not so (not an object, a field missing or of another type, NaN, zero or negative, another unit, currency or
several tiers) is skipped; two readable SKUs of one part, tier and region at different prices make that part
unknown. A tier is quoted only when every part of it has a price (a tier the catalog does not list, or lists in part,
is absent: the pool stays as it was). Not in the quote: the Local SSD bundled with A2 Ultra, A3 and A4 machine types
(billed by its own storage SKU per GiB-month), networking and disks.

A page that is not a SKU list (``skus`` or ``nextPageToken`` of another type) is refused (``bad_answer``); paging is
bounded (``http_retry.Pages``: at most 100 pages, no token twice). One catalog read serves every region and SKU for
``cache_s`` seconds (a failed read is not kept).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from gpufleet.adapters.gcp.machines import MACHINE_TYPES, MachineType
from gpufleet.adapters.gcp.session import GoogleApi
from gpufleet.adapters.http_retry import Pages
from gpufleet.adapters.price_port import PriceQuote
from gpufleet.adapters.providers import ProviderRefused
from gpufleet.domain.errors import ValidationError

log = logging.getLogger(__name__)

SERVICE = "services/6F81-5844-456A"  # Compute Engine in the Cloud Billing Catalog
SOURCE = "gcp:CloudBillingCatalog"
PAGE_SIZE = 5000  # the API's default, asked for explicitly
TIERS = ("on_demand", "spot")
GB_PER_GIB = Decimal(2**30) / Decimal(10**9)


@dataclass(frozen=True, slots=True)
class Part:
    name: str  # the SKU description's resource, before " running in <place>"
    unit: str  # "h" (a GPU, a slice, a vCPU per hour) or "GiBy.h" (a GiB of memory per hour)
    per_machine: int  # how many of them one machine uses


def _parts(m: MachineType, gpu: str, family: str) -> tuple[Part, ...]:
    return (
        Part(gpu, "h", m.gpus),
        Part(f"{family} Instance Core", "h", m.vcpus),
        Part(f"{family} Instance Ram", "GiBy.h", m.memory_gib),
    )


RECIPES: dict[str, tuple[Part, ...]] = {
    "b200": (Part("A4 Nvidia B200 (1 gpu slice)", "h", MACHINE_TYPES["b200"].gpus),),
    "h200_141gb": _parts(MACHINE_TYPES["h200_141gb"], "H200 141GB GPU", "A3 Ultra"),
    "h100_80gb": _parts(MACHINE_TYPES["h100_80gb"], "Nvidia H100 80GB GPU", "A3"),
    "a100_80gb": _parts(MACHINE_TYPES["a100_80gb"], "Nvidia Tesla A100 80GB GPU", "A2"),
    "l4": _parts(MACHINE_TYPES["l4"], "Nvidia L4 GPU", "G2"),
}
_KNOWN = frozenset(p.name.lower() for parts in RECIPES.values() for p in parts)

_DESCRIPTION = re.compile(
    r"(?P<pre>(?:spot )?preemptible )?(?P<name>.+?)(?P<attached> attached to (?:spot )?preemptible vms)?"
    r" running in \S.*",
    re.IGNORECASE,
)
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
_INT64 = re.compile(r"-?[0-9]{1,18}")


@dataclass(frozen=True, slots=True)
class _Row:
    name: str  # the part's name, lower case
    tier: str
    regions: frozenset[str]
    sku: dict[str, Any]


def _row(item: Any) -> _Row | None:
    """The part and tier a catalog item prices; None for an item that is not one of gpufleet's parts."""
    if not isinstance(item, dict):
        return None
    desc, category, regions = item.get("description"), item.get("category"), item.get("serviceRegions")
    if not isinstance(desc, str) or not isinstance(category, dict) or not isinstance(regions, list):
        return None
    m = _DESCRIPTION.fullmatch(" ".join(desc.split()))
    if m is None or m["name"].lower() not in _KNOWN or (m["pre"] and m["attached"]):
        return None
    preemptible, usage = bool(m["pre"] or m["attached"]), category.get("usageType")
    if usage == "OnDemand" and not preemptible:
        tier = "on_demand"
    elif usage == "Preemptible" and preemptible:
        tier = "spot"
    else:  # a commitment, or a usage type the description contradicts
        return None
    return _Row(m["name"].lower(), tier, frozenset(r for r in regions if isinstance(r, str)), item)


def _at_s(value: Any) -> float | None:
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _usd(money: Any) -> Decimal | None:
    """A ``Money`` in USD above zero; None for anything else."""
    if not isinstance(money, dict) or money.get("currencyCode", "USD") != "USD":
        return None
    units, nanos = money.get("units", "0"), money.get("nanos", 0)
    if isinstance(units, str) and _INT64.fullmatch(units):
        units = int(units)
    if isinstance(units, bool) or not isinstance(units, int) or isinstance(nanos, bool) or not isinstance(nanos, int):
        return None
    if abs(nanos) >= 10**9 or (units > 0 and nanos < 0) or (units < 0 and nanos > 0):
        return None
    usd = Decimal(units) + Decimal(nanos).scaleb(-9)
    return usd if usd > 0 else None


def _price(sku: dict[str, Any], unit: str, now_s: int) -> Decimal | None:
    """The SKU's price per ``unit`` effective at ``now_s`` (module docstring); None when it cannot be read."""
    infos = sku.get("pricingInfo")
    if not isinstance(infos, list):
        return None
    dated = [(at, i) for i in infos if isinstance(i, dict) and (at := _at_s(i.get("effectiveTime"))) is not None]
    dated = [(at, i) for at, i in dated if at <= now_s]
    if not dated:
        return None
    latest = max(at for at, _ in dated)
    prices = {_info_price(i, unit) for at, i in dated if at == latest}
    return prices.pop() if len(prices) == 1 else None


def _info_price(info: dict[str, Any], unit: str) -> Decimal | None:
    rate = info.get("currencyConversionRate", 1)
    if isinstance(rate, bool) or rate != 1:
        return None
    expression = info.get("pricingExpression")
    if not isinstance(expression, dict):
        return None
    tiers, usage_unit = expression.get("tieredRates"), expression.get("usageUnit")
    if not isinstance(tiers, list) or len(tiers) != 1 or not isinstance(tiers[0], dict):
        return None
    start = tiers[0].get("startUsageAmount", 0)
    if isinstance(start, bool) or start != 0:
        return None
    usd = _usd(tiers[0].get("unitPrice"))
    if usd is None:
        return None
    if usage_unit == unit:
        return usd
    if unit == "GiBy.h" and usage_unit == "GBy.h":
        return usd * GB_PER_GIB
    return None


class GcpCatalogPrices:
    provider = "gcp"

    def __init__(
        self, api: GoogleApi, *, cache_s: float = 300.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = api
        self.regions = api.config.regions
        self._cache_s = cache_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: tuple[float, list[_Row]] | None = None

    def skus(self) -> Collection[str]:
        return RECIPES.keys()

    def quotes(self, region: str, sku_id: str, *, now_s: int) -> list[PriceQuote]:
        parts = RECIPES.get(sku_id)
        if parts is None:
            raise ValidationError("sku", f"no Compute Engine machine type is priced for SKU {sku_id!r}")
        rows = [r for r in self._catalog() if region in r.regions]
        out = []
        for tier in TIERS:
            total = Decimal(0)
            for part in parts:
                price = self._part_price(rows, part, tier, region, now_s)
                if price is None:
                    break
                total += price * part.per_machine
            else:
                out.append(PriceQuote(tier, total / MACHINE_TYPES[sku_id].gpus, SOURCE))
        return out

    @staticmethod
    def _part_price(rows: list[_Row], part: Part, tier: str, region: str, now_s: int) -> Decimal | None:
        found = {p for r in rows if r.name == part.name.lower() and r.tier == tier
                 if (p := _price(r.sku, part.unit, now_s)) is not None}  # fmt: skip
        if len(found) > 1:
            log.warning("GCP catalog lists %s (%s) in %s at %d prices: not priced", part.name, tier, region, len(found))
        return found.pop() if len(found) == 1 else None

    def _catalog(self) -> list[_Row]:
        with self._lock:
            now = self._monotonic()
            if self._cached is None or now - self._cached[0] >= self._cache_s:
                self._cached = (now, self._read())
            return self._cached[1]

    def _read(self) -> list[_Row]:
        """Every page of Compute Engine's SKUs, kept: those that price a part of gpufleet's machine types."""
        rows: list[_Row] = []
        token = ""
        guard = Pages("skus.list")
        while True:
            params = {"currencyCode": "USD", "pageSize": str(PAGE_SIZE)}
            if token:
                params["pageToken"] = guard.next(token)
            page = self._api.call("skus.list", "GET", f"{SERVICE}/skus", params=params, in_project=False)
            skus, token = page.get("skus") or [], page.get("nextPageToken") or ""
            if not isinstance(skus, list) or not isinstance(token, str):
                got = f"skus {type(skus).__name__}, nextPageToken {type(token).__name__}"
                raise ProviderRefused("bad_answer", f"skus.list: not a SKU list ({got})", retryable=True)
            rows += [r for item in skus if (r := _row(item)) is not None]
            if not token:
                return rows
