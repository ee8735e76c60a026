"""The built-in price catalog: public list prices per GPU-hour (see docs/catalog.md for sources and dates).

On-demand and 1-yr reserved prices are AWS list prices (us-east-1, January 2026) divided by 8 GPUs per
instance. Where AWS lists no 1-yr reserved price for an instance (p5, p5en, p6-b200) the reserved price is the
on-demand price times 0.634, the reserved/on-demand ratio AWS lists for p4de.24xlarge. Neocloud prices are
the SkyPilot catalog prices for Nebius and Lambda; spot prices are Nebius's preemptible prices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from gpufleet.domain.pools import CapacityPool, Provider, Region, Tier

RESERVED_TO_ON_DEMAND = Decimal("0.634")  # p4de.24xlarge: 17.401365 / 27.44705


@dataclass(frozen=True, slots=True)
class ListPrice:
    sku_id: str
    on_demand: Decimal  # AWS us-east-1 $/GPU-h
    reserved_1y: Decimal  # AWS 1-yr no-upfront $/GPU-h (listed or derived by RESERVED_TO_ON_DEMAND)
    spot: Decimal  # Nebius preemptible $/GPU-h (or on-demand * 0.42, Nebius's H100 ratio, where unlisted)
    secondary: Decimal  # neocloud on-demand $/GPU-h (Nebius or Lambda)
    secondary_provider: str


def _d(x: str) -> Decimal:
    return Decimal(x)


LIST_PRICES: tuple[ListPrice, ...] = (
    # p6-b200.48xlarge 113.9328/8; reserved derived; Nebius B200 8-GPU 44.00/8; spot derived
    ListPrice("b200", _d("14.2416"), _d("9.0292"), _d("5.98"), _d("5.50"), "nebius"),
    # p5en.48xlarge 63.296/8; reserved derived; Nebius H200 preemptible 11.60/8, on-demand 28.00/8
    ListPrice("h200_141gb", _d("7.912"), _d("5.0162"), _d("1.45"), _d("3.50"), "nebius"),
    # p5.48xlarge 55.04/8; reserved derived; Nebius H100 preemptible 10.00/8, on-demand 23.60/8
    ListPrice("h100_80gb", _d("6.88"), _d("4.3619"), _d("1.25"), _d("2.95"), "nebius"),
    # p4de.24xlarge 27.44705/8 and 17.401365/8; Lambda A100-80GB 22.32/8; spot derived
    ListPrice("a100_80gb", _d("3.4309"), _d("2.1752"), _d("1.44"), _d("2.79"), "lambda"),
    # g6e.48xlarge 30.13118/8 and 18.98264/8; Nebius L40S 1-GPU 1.5484; spot derived
    ListPrice("l40s", _d("3.7664"), _d("2.3728"), _d("1.58"), _d("1.5484"), "nebius"),
    # g6.48xlarge 13.3504/8 and 8.69111/8; no neocloud L4 listed: secondary at on-demand
    ListPrice("l4", _d("1.6688"), _d("1.0864"), _d("0.70"), _d("1.6688"), "nebius"),
)

PRICES_BY_SKU: dict[str, ListPrice] = {p.sku_id: p for p in LIST_PRICES}


def sku_for(product: str, sku_ids: Sequence[str], sku_map: Mapping[str, str]) -> str | None:
    """The catalog SKU id of a GPU product name (``nvidia.com/gpu.product``): ``sku_map[product]`` if given, else
    the one SKU id whose ``_``-parts are all ``-``-tokens of the product (``h100_80gb`` matches
    ``NVIDIA-H100-80GB-HBM3``); None when none or several match."""
    if product in sku_map:
        return sku_map[product]
    tokens = set(product.lower().split("-"))
    hits = [s for s in sku_ids if set(s.lower().split("_")) <= tokens]
    return hits[0] if len(hits) == 1 else None


@dataclass(frozen=True, slots=True)
class ListPriceCatalog:
    """A price catalog over fixed list prices (implements :class:`gpufleet.ports.PriceCatalog`).

    ``reserved_to_on_demand`` is the ratio used where only one of the two prices is known.
    """

    prices: tuple[ListPrice, ...]
    reserved_to_on_demand: float = float(RESERVED_TO_ON_DEMAND)

    def list_price(self, sku_id: str) -> ListPrice | None:
        return next((p for p in self.prices if p.sku_id == sku_id), None)

    def sku_ids(self) -> tuple[str, ...]:
        return tuple(p.sku_id for p in self.prices)


#: The built-in list prices as a catalog: what the CLI, the simulator and the service inject by default.
BUILTIN_PRICE_CATALOG = ListPriceCatalog(LIST_PRICES)


def on_demand_usd_h(sku_id: str, catalog: ListPriceCatalog = BUILTIN_PRICE_CATALOG) -> float:
    """The on-demand list price of one GPU of ``sku_id`` per hour (0 when the catalog does not list it): what one
    more serving replica costs at the margin."""
    lp = catalog.list_price(sku_id)
    return float(lp.on_demand) if lp is not None else 0.0


BUILTIN_PROVIDERS: tuple[Provider, ...] = (
    Provider("aws", "Amazon Web Services", "hyperscaler"),
    Provider("nebius", "Nebius AI Cloud", "neocloud"),
    Provider("lambda", "Lambda Cloud", "neocloud"),
)

BUILTIN_REGIONS: tuple[Region, ...] = (
    Region("us-east-1", "aws", "us"),
    Region("us-west-2", "aws", "us"),
    Region("eu-north1", "nebius", "eu"),
    Region("us-central1", "nebius", "us"),
    Region("lambda-us-east-1", "lambda", "us"),
)


def default_pools(
    sku_id: str,
    region_id: str = "us-east-1",
    *,
    on_demand_quota_gpus: int | None = None,
    spot_preemption_rate_per_h: float = 0.05,
    secondary_lead_time_s: int = 3 * 86400,
    reserved_lead_time_s: int = 14 * 86400,
    reserved_term_months: int = 12,
    node_start_s: int = 600,
    secondary_node_start_s: int | None = None,
) -> tuple[CapacityPool, ...]:
    """The four tiers for one SKU in one region, priced from the built-in catalog.

    ``secondary_node_start_s`` is how long a secondary node takes to join (default: ``node_start_s``); the
    simulator sets it to the secondary lead time, since capacity there arrives only after it.
    """
    p = PRICES_BY_SKU[sku_id]
    sec_region = "eu-north1" if p.secondary_provider == "nebius" else "lambda-us-east-1"
    return (
        CapacityPool(
            f"aws/{region_id}/{sku_id}/reserved",
            "aws",
            region_id,
            sku_id,
            Tier.RESERVED,
            p.reserved_1y,
            term_months=reserved_term_months,
            lead_time_s=reserved_lead_time_s,
            node_start_s=node_start_s,
        ),
        CapacityPool(
            f"aws/{region_id}/{sku_id}/on_demand",
            "aws",
            region_id,
            sku_id,
            Tier.ON_DEMAND,
            p.on_demand,
            quota_gpus=on_demand_quota_gpus,
            node_start_s=node_start_s,
        ),
        CapacityPool(
            f"nebius/{sec_region}/{sku_id}/spot",
            "nebius",
            sec_region,
            sku_id,
            Tier.SPOT,
            p.spot,
            preemption_rate_per_h=spot_preemption_rate_per_h,
            node_start_s=node_start_s,
        ),
        CapacityPool(
            f"{p.secondary_provider}/{sec_region}/{sku_id}/secondary",
            p.secondary_provider,
            sec_region,
            sku_id,
            Tier.SECONDARY,
            p.secondary,
            lead_time_s=secondary_lead_time_s,
            node_start_s=node_start_s if secondary_node_start_s is None else secondary_node_start_s,
        ),
    )
