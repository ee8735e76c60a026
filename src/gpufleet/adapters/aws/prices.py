"""Prices from AWS (the cloud price port, ``adapters/price_port.py``): on-demand list prices (the Price List API,
GetProducts) and spot price history (EC2 DescribeSpotPriceHistory), per instance type and region, converted to USD
per GPU-hour. The spot quote is the median over availability zones of each zone's latest price of the last 7 days."""

from __future__ import annotations

import json
import statistics
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from gpufleet.adapters.aws.errors import call
from gpufleet.adapters.aws.reservations import epoch_s, ts
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import INSTANCE_TYPES, instance_type
from gpufleet.adapters.price_port import PriceQuote


@dataclass(frozen=True, slots=True)
class SpotPrice:
    availability_zone: str
    usd_per_gpu_h: Decimal
    at_s: int


SPOT_LOOKBACK_S = 7 * 86400


class AwsPrices:
    provider = "aws"

    def __init__(self, clients: AwsClients) -> None:
        self._clients = clients
        self.regions = clients.config.regions

    def skus(self) -> Collection[str]:
        return INSTANCE_TYPES.keys()

    def quotes(self, region: str, sku_id: str, *, now_s: int) -> list[PriceQuote]:
        out = []
        od = self.on_demand_usd_per_gpu_h(region, sku_id)
        if od is not None:
            out.append(PriceQuote("on_demand", od, "pricing:GetProducts"))
        spot = self.spot_usd_per_gpu_h(region, sku_id, since_s=now_s - SPOT_LOOKBACK_S)
        if spot:
            median = Decimal(str(statistics.median(p.usd_per_gpu_h for p in spot)))
            out.append(PriceQuote("spot", median, f"ec2:DescribeSpotPriceHistory ({len(spot)} AZs)"))
        return out

    def on_demand_usd_per_gpu_h(self, region: str, sku_id: str) -> Decimal | None:
        """The Linux, shared-tenancy on-demand price of the SKU's instance type / its GPUs (None: not listed)."""
        it = instance_type(sku_id)
        pricing = self._clients.client("pricing", self._clients.config.pricing_region)
        filters = [
            {"Type": "TERM_MATCH", "Field": field, "Value": value}
            for field, value in (
                ("instanceType", it.name),
                ("regionCode", region),
                ("operatingSystem", "Linux"),
                ("tenancy", "Shared"),
                ("preInstalledSw", "NA"),
                ("capacitystatus", "Used"),
            )
        ]
        page = call("GetProducts", pricing.get_products, ServiceCode="AmazonEC2", Filters=filters, MaxResults=10)
        for doc in page.get("PriceList", []):
            usd = _on_demand_usd(json.loads(doc) if isinstance(doc, str) else doc)
            if usd is not None:
                return usd / it.gpus
        return None

    def spot_usd_per_gpu_h(self, region: str, sku_id: str, *, since_s: int) -> list[SpotPrice]:
        """The latest spot price per availability zone since ``since_s`` (Linux/UNIX)."""
        it = instance_type(sku_id)
        ec2 = self._clients.client("ec2", region)
        latest: dict[str, SpotPrice] = {}
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {
                "InstanceTypes": [it.name],
                "ProductDescriptions": ["Linux/UNIX"],
                "StartTime": ts(since_s),
            }
            if token:
                kwargs["NextToken"] = token
            page = call("DescribeSpotPriceHistory", ec2.describe_spot_price_history, **kwargs)
            for h in page.get("SpotPriceHistory", []):
                if h.get("InstanceType") != it.name:
                    continue
                p = SpotPrice(
                    str(h.get("AvailabilityZone", "")),
                    Decimal(str(h.get("SpotPrice", "0"))) / it.gpus,
                    epoch_s(h.get("Timestamp", 0)),
                )
                if p.availability_zone not in latest or p.at_s > latest[p.availability_zone].at_s:
                    latest[p.availability_zone] = p
            token = page.get("NextToken")
            if not token:
                return sorted(latest.values(), key=lambda p: p.availability_zone)


def _on_demand_usd(product: dict[str, Any]) -> Decimal | None:
    for term in product.get("terms", {}).get("OnDemand", {}).values():
        for dim in term.get("priceDimensions", {}).values():
            usd = dim.get("pricePerUnit", {}).get("USD")
            if usd is not None and dim.get("unit", "Hrs") in ("Hrs", "Hours") and Decimal(str(usd)) > 0:
                return Decimal(str(usd))  # the first positive hourly price (a 0.00 row is a reservation fee's)
    return None
