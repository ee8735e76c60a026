"""Constrained scalar types shared by the API schemas: bounded, no control characters, JSON numbers for money."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import Path, Query
from pydantic import Field, PlainSerializer

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"
POOL_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}$"
SKU_PATTERN = r"^[a-z0-9][a-z0-9_]{0,63}$"
NAME_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"
IDEMPOTENCY_KEY_PATTERN = ID_PATTERN  # an Idempotency-Key header (reservations, admissions): like an id
MAX_INT = 2**31 - 1
MAX_TIME_S = 253_402_300_799  # 9999-12-31T23:59:59Z
MAX_LEAD_TIME_S = 315_360_000  # ten years of 365 days: a duration the INTEGER column pools.lead_time_s holds

Id = Annotated[str, Field(pattern=ID_PATTERN, examples=["h100_80gb"])]
PoolId = Annotated[str, Field(pattern=POOL_ID_PATTERN, examples=["aws/us-east-1/h100_80gb/reserved"])]
SkuId = Annotated[str, Field(pattern=SKU_PATTERN, examples=["h100_80gb"])]
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=200)]
Geo = Annotated[str, Field(pattern=NAME_PATTERN, max_length=32, examples=["us"])]  # regions.geo VARCHAR(32)
Interconnect = Annotated[str, Field(pattern=NAME_PATTERN, max_length=64, examples=["nvlink"])]  # VARCHAR(64)
Count = Annotated[int, Field(ge=0, le=MAX_INT, strict=True)]  # strict: true or "8" is not a count
PositiveCount = Annotated[int, Field(gt=0, le=MAX_INT, strict=True)]
# strict: a JSON string ("12", "0.5") is not a number, and true is not 1
Seconds = Annotated[int, Field(ge=0, le=MAX_TIME_S, strict=True)]
LeadTimeS = Annotated[int, Field(ge=0, le=MAX_LEAD_TIME_S, strict=True)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)]
PositiveFloat = Annotated[float, Field(gt=0.0, le=1e9, allow_inf_nan=False, strict=True)]
NonNegFloat = Annotated[float, Field(ge=0.0, le=1e12, allow_inf_nan=False, strict=True)]
UsdIn = Annotated[Decimal, Field(ge=0, le=Decimal("1e12"), max_digits=20, decimal_places=6, allow_inf_nan=False)]
# Money goes out as a JSON number (rounded to the cent or micro-dollar by the service), not a string.
UsdOut = Annotated[Decimal, PlainSerializer(float, return_type=float, when_used="json")]

IdPath = Annotated[str, Path(pattern=ID_PATTERN)]
PoolIdPath = Annotated[str, Path(pattern=POOL_ID_PATTERN)]
SkuQuery = Annotated[str, Query(pattern=SKU_PATTERN, examples=["h100_80gb"])]
WindowQuery = Annotated[str, Query(max_length=16, examples=["7d"], description="<n>h, <n>d or <n>w, at most 366d")]
Limit = Annotated[int, Query(ge=1, le=1000)]
Offset = Annotated[int, Query(ge=0, le=1_000_000)]
