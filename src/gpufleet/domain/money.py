"""Exact money.

Prices are held as integer micro-dollars per GPU-hour (``uusd_per_gpu_h``) and time as integer seconds,
so a charge is the exact integer ``price_uusd_per_gpu_h * gpu_seconds`` in *ledger units*
(micro-dollar GPU-seconds per GPU-hour). Sums of ledger units are exact; conversion to ``Decimal`` USD
happens only for display. That is what makes "allocated + idle == fleet cost" hold to the last digit.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

MICRO = 1_000_000
SECONDS_PER_HOUR = 3600
LEDGER_UNITS_PER_USD = MICRO * SECONDS_PER_HOUR
CENT = Decimal("0.01")


def price_to_uusd(price_usd_per_gpu_h: Decimal | str | float) -> int:
    """Convert a USD price to integer micro-dollars, rounding half-even at the micro-dollar."""
    value = Decimal(str(price_usd_per_gpu_h)) * MICRO
    return int(value.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


def uusd_to_usd(uusd: int) -> Decimal:
    return Decimal(uusd) / MICRO


def charge_units(price_uusd_per_gpu_h: int, gpus: int, seconds: int) -> int:
    """Exact ledger units for ``gpus`` GPUs held for ``seconds`` at a price per GPU-hour."""
    return price_uusd_per_gpu_h * gpus * seconds


def units_to_usd(units: int) -> Decimal:
    """Ledger units to USD (exact division result at Decimal's 28-digit precision)."""
    return Decimal(units) / LEDGER_UNITS_PER_USD


def units_to_cents(units: int) -> Decimal:
    return units_to_usd(units).quantize(CENT, rounding=ROUND_HALF_EVEN)


def usd_float(units: int) -> float:
    """Rounded to the cent, as a float for JSON and charts."""
    return float(units_to_cents(units))
