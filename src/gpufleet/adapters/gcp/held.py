"""What GCP holds for an order against gpufleet's record of it (``OrderRecord``), and its end at the recorded term.

Anyone with ``compute.reservations.update`` (or an amendment of a future reservation) can resize an order or move its
end: a reservation's ``deleteAtTime`` (GCP deletes it then) removed or moved later, a future reservation's window (and
its auto-created reservations' delete time) moved later, or its start alone moved later (less delivered). GCP then
bills capacity outside the term two people approved. The record decides, as for Azure (which holds no end at all):
:func:`past_record_end` says what GCP holds past it, and the adapter ends it there (``describe``); a future
reservation still pending at the recorded end (its window moved later, or never fulfilled) delivered nothing within
the term (:func:`never_delivered`) and is cancelled there. A difference GCP's own end will not outlive (an end earlier
than the record's, a count, a start) is only reported (:func:`held_against_record`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.gcp.machines import MACHINE_TYPES, machines_for
from gpufleet.adapters.providers import OrderRecord, OrderRequest


def rfc3339(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch_s(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _end(kind: str, got: dict[str, Any]) -> tuple[Any, str]:
    if kind == "reservations":
        return got.get("deleteAtTime"), "deleteAtTime"
    return (got.get("timeWindow") or {}).get("endTime"), "timeWindow.endTime"


def _end_s(end: Any) -> int | None:
    try:
        return None if end is None else epoch_s(str(end))
    except ValueError:
        return None


def held_against_record(
    kind: str, got: dict[str, Any], record: OrderRecord, autos: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """What GCP holds against gpufleet's record (the machines approved, the term's end), as the state's warnings.
    ``autos``: a delivered future reservation's auto-created reservations that exist (by name), what GCP bills: their
    machines and each one's ``deleteAtTime`` are checked too (anyone can resize one or remove its end)."""
    out = _autos_against_record(autos or {}, record)
    if kind == "reservations":
        count = (got.get("specificReservation") or {}).get("count")
    else:
        count = (got.get("specificSkuProperties") or {}).get("totalCount")
    if record.units > 0 and record.sku_id in MACHINE_TYPES:
        approved = machines_for(record.sku_id, record.units)
        if _int(count) != approved:
            out.append(f"GCP holds {str(count)[:20]} machines, {approved} approved ({record.units} GPUs)")
    if kind == "futureReservations" and record.start_s is not None:  # a window started later delivers less
        start = (got.get("timeWindow") or {}).get("startTime")
        if _end_s(start) != record.start_s:
            out.append(f"its timeWindow.startTime is {str(start)[:40]}, gpufleet's record starts the term at "
                       f"{rfc3339(record.start_s)}")  # fmt: skip
    end, end_field = _end(kind, got)
    if _end_s(end) != record.end_s:
        said = "is gone (billed until deleted)" if end is None else f"is {str(end)[:40]}"
        out.append(f"its {end_field} {said}, gpufleet's record ends the term at {rfc3339(record.end_s)}")
    return out


def _autos_against_record(autos: dict[str, dict[str, Any]], record: OrderRecord) -> list[str]:
    out: list[str] = []
    if not autos:
        return out
    if record.units > 0 and record.sku_id in MACHINE_TYPES:
        approved = machines_for(record.sku_id, record.units)
        counts = [_int((r.get("specificReservation") or {}).get("count")) for r in autos.values()]
        if None in counts or sum(c or 0 for c in counts) > approved:  # fewer: GCP delivered part (reported as such)
            held = "+".join(str(c) for c in counts)
            out.append(f"its auto-created reservations {sorted(autos)} hold {held} machines, {approved} approved")
        elif sum(c or 0 for c in counts) < approved:
            out.append(f"its auto-created reservations {sorted(autos)} hold {sum(c or 0 for c in counts)} machines "
                       f"(delivered in part), {approved} approved")  # fmt: skip
    for each, res in sorted(autos.items()):
        end = res.get("deleteAtTime")
        if _end_s(end) != record.end_s:
            said = "is gone (billed until deleted)" if end is None else f"is {str(end)[:40]}"
            out.append(f"its auto-created reservation {each}'s deleteAtTime {said}, gpufleet's record ends the term at "
                       f"{rfc3339(record.end_s)}")  # fmt: skip
    return out


def not_the_order(kind: str, got: dict[str, Any], region: str, order: OrderRequest) -> str:
    """Why the resource GCP holds under the order's name, in ``region``, is not ``order`` ("" when it is): its
    region, machine type and machines."""
    out = []
    if region != order.region_id:
        out.append(f"in {region}, approved in {order.region_id}")
    if kind == "reservations":
        spec = got.get("specificReservation") or {}
        count = spec.get("count")
    else:
        spec = got.get("specificSkuProperties") or {}
        count = spec.get("totalCount")
    if order.sku_id in MACHINE_TYPES:
        want = MACHINE_TYPES[order.sku_id].name
        held = str((spec.get("instanceProperties") or {}).get("machineType"))
        if held.rsplit("/", 1)[-1] != want:
            out.append(f"{held[:40]}, approved {want}")
        machines = machines_for(order.sku_id, order.units)
        if _int(count) != machines:
            out.append(f"{str(count)[:20]} machines, approved {machines}")
    return ", ".join(out)


def never_delivered(got: dict[str, Any], record: OrderRecord) -> str:
    """A future reservation still pending at the recorded term's end: what GCP holds of it (its state and window).
    It delivered nothing within the approved term (its window moved later, or GCP never fulfilled it), so gpufleet
    cancels it there: whatever GCP would deliver later is outside what two people approved."""
    window = got.get("timeWindow") or {}
    word = str((got.get("status") or {}).get("procurementStatus") or "DRAFTING")[:40]
    return (f"never delivered within the recorded term (ended {rfc3339(record.end_s)}): {word}, its window "
            f"{str(window.get('startTime'))[:40]} to {str(window.get('endTime'))[:40]}")  # fmt: skip


def past_record_end(
    kind: str, got: dict[str, Any], record: OrderRecord, autos: dict[str, dict[str, Any]] | None = None
) -> str:
    """What GCP holds past the recorded term's end ("" when GCP's own end is the record's or sooner: GCP ends it):
    an end gone, unreadable or later than the record's (a future reservation's window, or the ``deleteAtTime`` of
    one of its auto-created reservations ``autos``), and, for a reservation, the machines in use in it."""
    past = [f"its auto-created reservation {each}'s deleteAtTime {_said(res.get('deleteAtTime'))}"
            for each, res in sorted((autos or {}).items()) if _past(res.get("deleteAtTime"), record)]  # fmt: skip
    end, end_field = _end(kind, got)
    if _past(end, record):
        past.insert(0, f"GCP's {end_field} {_said(end)}")
    if not past:
        return ""
    found = "; ".join(past) + f", past the recorded term's end {rfc3339(record.end_s)}"
    if kind == "reservations":
        spec = got.get("specificReservation") or {}
        found += f"; {str(spec.get('inUseCount', 0))[:20]} of {str(spec.get('count'))[:20]} machines in use"
    return found


def _past(end: Any, record: OrderRecord) -> bool:
    """An end gone, unreadable or later than the record's: GCP holds it past the recorded term."""
    end_s = _end_s(end)
    return end_s is None or end_s > record.end_s


def _said(end: Any) -> str:
    return "is gone" if end is None else f"is {str(end)[:40]}"


def auto_created(got: dict[str, Any], zone: str) -> list[str]:
    """The names of a future reservation's auto-created reservations in ``zone`` (its ``status`` lists their URLs)."""
    links = (got.get("status") or {}).get("autoCreatedReservations") or []
    names = []
    for link in links if isinstance(links, list) else []:
        parts = str(link).rstrip("/").split("/")
        if len(parts) >= 4 and parts[-2] == "reservations" and parts[-4] == "zones" and parts[-3] == zone:
            names.append(parts[-1])
    return names
