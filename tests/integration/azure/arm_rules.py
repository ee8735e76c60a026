"""ARM's error format and the rules of a capacity reservation PUT, for the Azure fake (fake_azure.py, whose
docstring says which rules come from the SDK's docstrings and which are guessed)."""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta
from typing import Any

from azure.mgmt.compute import models

RESERVATION_STATES = frozenset(s.value for s in models.ReservationState)
LOCKED = frozenset({"Committed", "Live", "PartiallyFulfilled"})  # not deletable before the commitment ends
ZONES = frozenset({"1", "2", "3"})
FUTURE_MIN_DAYS, FUTURE_MAX_MONTHS = 7, 6  # ScheduleProfile.start's docstring
DEFAULT_COMMITMENT_DAYS = 30  # guessed: "Will be populated with a default value if not provided."
MODIFIABLE_LEAD_DAYS = 7  # guessed: modifiableUntil is this long before the start
START = "properties.scheduleProfile.start"
Res = dict[str, Any]


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str, target: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.target = status, code, message, target

    def body(self) -> Res:
        err = {"code": self.code, "message": self.message}
        return {"error": err | ({"target": self.target} if self.target else {})}


def invalid(message: str, target: str) -> ArmError:
    return ArmError(400, "InvalidParameter", message, target)


def not_found(resource: str, rg: str) -> ArmError:
    msg = (
        f"The Resource '{resource}' under resource group '{rg}' was not found. "
        "For more details please go to https://aka.ms/ARMResourceNotFoundFix"
    )
    return ArmError(404, "ResourceNotFound", msg)


def stamp(t: datetime) -> str:
    """ARM's style: 7 fractional digits and an offset, e.g. 2026-05-01T10:00:00.1234560+00:00."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "0+00:00"


def same_location(a: str, b: str) -> bool:
    return a.replace(" ", "").lower() == b.replace(" ", "").lower()  # ARM takes "East US" for "eastus"


def add_months(d: date, months: int) -> date:
    y, m = divmod(d.month - 1 + months, 12)
    year, month = d.year + y, m + 1
    return date(year, month, min(d.day, calendar.monthrange(year, month)[1]))


def _midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def commitment_end(r: Res) -> datetime:
    return _midnight(date.fromisoformat(r["schedule"]["start"])) + timedelta(
        days=r["schedule"]["minimumCommitmentDays"]
    )


def modifiable_until(r: Res) -> datetime:
    return _midnight(date.fromisoformat(r["schedule"]["start"])) - timedelta(days=MODIFIABLE_LEAD_DAYS)


def committed(r: Res, now: datetime) -> bool:
    """A Future reservation that may not be deleted now (the SDK's begin_delete docstring)."""
    return r["schedule"] is not None and r["reservationState"] in LOCKED and now < commitment_end(r)


def desired(group: Res, body: Res, now: datetime, old: Res | None) -> Res:
    """The reservation a PUT asks for: ``location``, ``zones``, ``sku``, ``tags``, ``schedule`` (a Future reservation's
    ``{"start", "minimumCommitmentDays"}`` or None), checked against its group and ``now``; ArmError if refused."""
    location = body.get("location")
    if not location:
        raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
    if not same_location(location, group["location"]):
        raise invalid(f"location {location!r} differs from its group's {group['location']!r}", "location")
    sku = dict(body.get("sku") or {})
    for field in ("name", "capacity"):
        if field not in sku:
            raise invalid(f"sku.{field} is required for a capacity reservation", f"sku.{field}")
    if sku["capacity"] < 0:
        raise invalid(f"sku.capacity {sku['capacity']} must not be negative", "sku.capacity")
    zones = list(body.get("zones") or [])
    if len(zones) > 1:
        raise invalid(f"a capacity reservation takes at most one zone, got {zones}", "zones")
    if group["zones"] and (not zones or zones[0] not in group["zones"]):
        raise invalid(f"zones {zones} must be one of its group's zones {group['zones']}", "zones")
    if zones and not group["zones"]:
        raise invalid(f"zones {zones}: a regional group holds only regional capacity reservations", "zones")
    profile = (body.get("properties") or {}).get("scheduleProfile")
    schedule = None if profile is None else _schedule(profile, now, old)
    return {
        "location": location,
        "zones": zones,
        "sku": sku,
        "tags": dict(body.get("tags") or {}),
        "schedule": schedule,
    }


def _schedule(profile: Res, now: datetime, old: Res | None) -> Res:
    start = profile.get("start")
    if not isinstance(start, str):
        raise invalid("a Future capacity reservation's scheduleProfile needs a start date", START)
    try:
        day = date.fromisoformat(start) if len(start) == 10 else None
    except ValueError:
        day = None
    if day is None:
        raise invalid(f"{START} {start!r} is not a date (YYYY-MM-DD)", START)
    unchanged = old is not None and old["schedule"] is not None and old["schedule"]["start"] == start
    earliest, latest = now.date() + timedelta(days=FUTURE_MIN_DAYS), add_months(now.date(), FUTURE_MAX_MONTHS)
    if not unchanged and not earliest <= day <= latest:
        msg = (
            f"{START} {start} must be at least {FUTURE_MIN_DAYS} days and at most {FUTURE_MAX_MONTHS} months in the "
            f"future: between {earliest} and {latest}"
        )
        raise invalid(msg, START)
    kept = old["schedule"]["minimumCommitmentDays"] if old is not None and old["schedule"] else DEFAULT_COMMITMENT_DAYS
    days = profile.get("minimumCommitmentDays", kept)
    if days < 1:
        raise invalid(
            f"minimumCommitmentDays {days} must be positive", "properties.scheduleProfile.minimumCommitmentDays"
        )
    return {"start": start, "minimumCommitmentDays": days}
