"""On-Demand Capacity Reservations behind the provider port (EC2 CreateCapacityReservation & co).

Contract (the port's): ``submit(key, order)`` first looks the order up by its key, then creates it with
``ClientToken=key`` and the key as the tag ``gpufleet:idempotency-key``; AWS dedups on the ClientToken and
``find(key)`` finds the reservation by the tag, so a retry after an unknown outcome never buys twice.
``describe`` maps EC2's states onto the lifecycle: pending (pending, assessing, scheduled, payment-pending,
delayed), active (active, cancelling, unavailable), expired, cancelled (cancelled, failed, payment-failed,
unsupported), with what EC2 holds checked against gpufleet's record (instances approved, a future-dated one's start,
the term's end: a difference is the state's ``warning``, reported; at the recorded end one EC2 holds active past it is
cancelled and reported expired, one still pending then, never delivered within the term, is cancelled and reported
cancelled, ``OrderState.ended``; a scheduled one EC2 cancels only against a cancellation quote is held, warned).
``find`` adopts a tagged reservation only when it holds the order (region, instance type, count): else ``name_taken``. Units are GPUs; AWS reserves whole instances, so ``ceil(units / GPUs per instance)`` are reserved.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gpufleet.adapters.aws.errors import call
from gpufleet.adapters.aws.session import AwsClients
from gpufleet.adapters.aws.skus import INSTANCE_TYPES, instance_type, instances_for
from gpufleet.adapters.providers import (
    LifecycleState,
    OrderRecord,
    OrderRequest,
    OrderState,
    ProviderOrder,
    ProviderRefused,
    ProviderTimeout,
    cancel_undelivered,
)
from gpufleet.domain.reservations import term_seconds

log = logging.getLogger(__name__)

KEY_TAG = "gpufleet:idempotency-key"
_STATES: dict[str, LifecycleState] = {
    "pending": "pending",
    "assessing": "pending",
    "scheduled": "pending",
    "payment-pending": "pending",
    "delayed": "pending",
    "active": "active",
    "cancelling": "active",
    "unavailable": "active",
    "expired": "expired",
    "cancelled": "cancelled",
    "failed": "cancelled",
    "payment-failed": "cancelled",
    "unsupported": "cancelled",
}


def ts(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def epoch_s(value: Any) -> int:
    return int(value.timestamp()) if isinstance(value, datetime) else int(value)


def lifecycle(provider_state: str) -> LifecycleState:
    return _STATES.get(provider_state, "pending")


class AwsCapacityReservations:
    """The provider port over EC2 On-Demand Capacity Reservations. ``now_s`` (the injected clock) decides only
    whether a start lies in the future; then ``StartDate`` and ``CommitmentDuration`` are sent (a future-dated
    reservation, which EC2 assesses first: state ``assessing`` / ``scheduled``)."""

    def __init__(
        self, clients: AwsClients, *, now_s: Callable[[], int] | None = None, match_criteria: str = "open"
    ) -> None:
        self._clients = clients
        self._now_s = now_s
        self._match = match_criteria

    def _ec2(self, region: str) -> Any:
        return self._clients.client("ec2", region)

    # ---- the port -----------------------------------------------------------------------------------------
    def units_bought(self, sku_id: str, units: int) -> int:
        """GPUs of the whole instances an order of ``units`` GPUs reserves (the approval values these)."""
        it = INSTANCE_TYPES.get(sku_id)
        return units if it is None else instances_for(sku_id, units) * it.gpus

    def submit(self, key: str, order: OrderRequest) -> ProviderOrder:
        if order.sku_id not in INSTANCE_TYPES:  # refused before any call: the reservation is cancelled with the reason
            raise ProviderRefused("sku_not_offered", f"no EC2 instance type is mapped for SKU {order.sku_id}")
        found = self.find(key, order)
        if found is not None:
            return found
        return self.create(key, order)

    def create(self, key: str, order: OrderRequest) -> ProviderOrder:
        """CreateCapacityReservation under ``ClientToken=key`` (no lookup first; ``submit`` does that)."""
        it = instance_type(order.sku_id)
        end_s = order.start_s + term_seconds(order.term_months)
        params: dict[str, Any] = {
            "ClientToken": key,
            "InstanceType": it.name,
            "InstancePlatform": self._clients.config.instance_platform,
            "AvailabilityZone": self._clients.config.zone(order.region_id),
            "InstanceCount": instances_for(order.sku_id, order.units),
            "EndDateType": "limited",
            "EndDate": ts(end_s),
            "InstanceMatchCriteria": self._match,
            "TagSpecifications": [{"ResourceType": "capacity-reservation", "Tags": _tags(key, order)}],
        }
        if self._now_s is not None and order.start_s > self._now_s():
            params["StartDate"] = ts(order.start_s)
            params["CommitmentDuration"] = term_seconds(order.term_months)
        ec2 = self._ec2(order.region_id)
        out = call("CreateCapacityReservation", ec2.create_capacity_reservation, **params)
        cr = out.get("CapacityReservation") or {}
        dry = bool((out.get("ResponseMetadata") or {}).get("DryRun"))  # a dry run's stand-in answer holds no order
        if not cr.get("CapacityReservationId") and not dry:  # an answer without the order: it may exist, look it up
            raise ProviderTimeout(f"CreateCapacityReservation answered no CapacityReservationId for {key}")
        return ProviderOrder(
            str(cr.get("CapacityReservationId", "")),
            key,
            order.sku_id,
            order.region_id,
            order.units,
            order.term_months,
            order.start_s,
        )

    def find(self, key: str, order: OrderRequest | None = None) -> ProviderOrder | None:
        """The reservation tagged with ``key`` in any configured region, if it is the order: anyone with
        ``ec2:CreateTags`` can put the key on another reservation, so what EC2 holds is checked first: the region,
        instance type and instance count of ``order`` (without it, of the reservation's own ``gpufleet:sku`` and
        ``gpufleet:gpus`` tags). Tagged reservations none of which is the order: a ``blocked`` ``name_taken``
        refusal naming what differs (held for a person, never adopted or cancelled: it is not gpufleet's, or it was
        modified at AWS)."""
        tagged = [(region, cr) for region in self._clients.config.regions
                  for cr in self._reservations(region, [{"Name": f"tag:{KEY_TAG}", "Values": [key]}])]  # fmt: skip
        why = ""
        for region, cr in tagged:
            why = _not_the_order(cr, region, order)
            if not why:
                return _order(cr, region)
        if not tagged:
            return None
        cid = str(tagged[0][1].get("CapacityReservationId", ""))[:40]
        raise ProviderRefused(
            "name_taken",
            f"capacity reservation {cid} carries {KEY_TAG}={key} but is not the order approved ({why}): gpufleet did "
            "not create it, or it was modified at AWS; remove the tag from it (or cancel it) to resume",
            blocked=True,
        )

    def describe(
        self, order_ids: Sequence[str], records: Mapping[str, OrderRecord] | None = None
    ) -> dict[str, OrderState]:
        """The fleet's reservations (listed by their key tag, one list per region); an order the list misses (its
        ``gpufleet:idempotency-key`` tag deleted at AWS by anyone with ``ec2:DeleteTags``) is read by its id in the
        region of gpufleet's record, with a warning: the tag never decides whether an order is followed. EC2 ends a
        reservation at its own ``EndDate`` (sent at creation, from the record); submission is synchronous (no
        operation to follow)."""
        wanted = set(order_ids)
        out: dict[str, OrderState] = {}
        for region in self._clients.config.regions:
            for cr in self._reservations(region, [{"Name": "tag-key", "Values": [KEY_TAG]}]):
                cid = str(cr.get("CapacityReservationId", ""))
                if cid in wanted:
                    out[cid] = self._state_of(region, cr, (records or {}).get(cid), "")
        for cid in sorted(wanted - set(out)):
            record = (records or {}).get(cid)
            if record is None or not record.region or not cid.startswith("cr-"):
                continue  # no record of where it is: unknown, as before
            try:
                page = call("DescribeCapacityReservations", self._ec2(record.region).describe_capacity_reservations,
                            CapacityReservationIds=[cid])  # fmt: skip
            except ProviderRefused as exc:  # gone from AWS's answers (NotFound) or refused: unknown this pass
                log.warning("capacity reservation %s not described by its id: %s", cid, exc)
                continue
            for cr in page.get("CapacityReservations", [])[:1]:
                warning = f"its {KEY_TAG} tag is gone (deleted at AWS?): followed by its id in gpufleet's record"
                out[cid] = self._state_of(record.region, cr, record, warning)
        return out

    def _state_of(self, region: str, cr: dict[str, Any], record: OrderRecord | None, warning: str) -> OrderState:
        """One reservation's state, checked against gpufleet's record; one EC2 holds active past the recorded term
        (its ``EndDate`` moved later or removed at AWS) is cancelled there, whatever runs in it (the instances run
        on, on demand, as Azure's path deletes at the recorded end whatever uses it), and reported expired."""
        cid, word = str(cr.get("CapacityReservationId", "")), str(cr.get("State", "pending"))
        held = _against_record(cr, record)
        warning = "; ".join(w for w in (warning, held) if w)
        over = record is not None and self._now_s is not None and self._now_s() >= record.end_s
        if over and record is not None and lifecycle(word) == "pending":  # it delivered nothing within the term
            return self._cancel_undelivered(region, cr, record, warning)
        found = _past_end(cr, record) if over and record is not None else ""
        if lifecycle(word) != "active" or not found:
            return OrderState(cid, lifecycle(word), word, warning=warning)
        try:
            self.cancel(region, cid)
        except (ProviderRefused, ProviderTimeout) as exc:
            said = exc.code if isinstance(exc, ProviderRefused) else "unanswered"
            return OrderState(cid, "active", word, f"term over, cancel failed ({said}): tried again", warning=warning)
        ended = f"{found}: cancelled by gpufleet (instances in it run on, on demand)"
        return OrderState(cid, "expired", word, warning=warning, ended=ended)

    def _cancel_undelivered(self, region: str, cr: dict[str, Any], record: OrderRecord, warning: str) -> OrderState:
        """Cancel a reservation still pending at the recorded term's end (its start pushed out, or EC2 never
        delivered): whatever EC2 would deliver later is outside the approved term. EC2 cancels an assessing or delayed
        one at no charge; a scheduled one only against a cancellation quote (charges for the commitment), which
        gpufleet does not accept on its own: refused, it stays pending, said in the warning, tried on each pass."""
        cid, word = str(cr.get("CapacityReservationId", "")), str(cr.get("State", "pending"))
        start = cr.get("StartDate")
        found = (f"never delivered within the recorded term (ended {ts(record.end_s).isoformat()}): {word[:40]}, "
                 f"StartDate {start.isoformat() if isinstance(start, datetime) else str(start)[:40]}")  # fmt: skip
        quote = " (EC2 cancels a scheduled one only against a cancellation quote: charges a person accepts)"
        return cancel_undelivered(lambda: self.cancel(region, cid), cid, word, found, warning,
                                  note=quote if word == "scheduled" else "")  # fmt: skip

    # ---- beyond the port ----------------------------------------------------------------------------------
    def modify(
        self, region: str, reservation_id: str, *, instance_count: int | None = None, end_s: int | None = None
    ) -> bool:
        params: dict[str, Any] = {"CapacityReservationId": reservation_id}
        if instance_count is not None:
            params["InstanceCount"] = instance_count
        if end_s is not None:
            params["EndDate"] = ts(end_s)
            params["EndDateType"] = "limited"
        ec2 = self._ec2(region)
        out = call("ModifyCapacityReservation", ec2.modify_capacity_reservation, **params)
        return bool(out.get("Return", False))

    def cancel(self, region: str, reservation_id: str) -> bool:
        ec2 = self._ec2(region)
        out = call("CancelCapacityReservation", ec2.cancel_capacity_reservation, CapacityReservationId=reservation_id)
        return bool(out.get("Return", False))

    def reservations(self, region: str) -> list[dict[str, Any]]:
        """Every capacity reservation this fleet created in the region (raw EC2 dicts)."""
        return list(self._reservations(region, [{"Name": "tag-key", "Values": [KEY_TAG]}]))

    def _reservations(self, region: str, filters: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        ec2 = self._ec2(region)
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Filters": filters}
            if token:
                kwargs["NextToken"] = token
            page = call("DescribeCapacityReservations", ec2.describe_capacity_reservations, **kwargs)
            yield from page.get("CapacityReservations", [])
            token = page.get("NextToken")
            if not token:
                return


def _tags(key: str, order: OrderRequest) -> list[dict[str, str]]:
    return [
        {"Key": KEY_TAG, "Value": key},
        {"Key": "gpufleet:sku", "Value": order.sku_id},
        {"Key": "gpufleet:gpus", "Value": str(order.units)},
        {"Key": "gpufleet:term-months", "Value": str(order.term_months)},
        {"Key": "gpufleet:start-s", "Value": str(order.start_s)},
    ]


def _against_record(cr: dict[str, Any], record: OrderRecord | None) -> str:
    """What EC2 holds for an order against gpufleet's record (the instances approved, the term's end): a reservation
    modified at AWS (``ModifyCapacityReservation``: more instances, a later end, or none: billed until cancelled) is
    followed as AWS holds it, the difference reported ("" when they agree, or without a record)."""
    if record is None:
        return ""
    out: list[str] = []
    if record.units > 0 and record.sku_id in INSTANCE_TYPES:
        approved = instances_for(record.sku_id, record.units)
        held = cr.get("TotalInstanceCount")
        if held != approved:
            out.append(f"AWS holds {str(held)[:20]} instances, {approved} approved ({record.units} GPUs)")
    start_s = _start_s(cr)
    if record.start_s is not None and start_s is not None and start_s != record.start_s:  # a start pushed out
        out.append(f"its StartDate is {ts(start_s).isoformat()}, gpufleet's record starts the term at "
                   f"{ts(record.start_s).isoformat()}")  # fmt: skip
    end_s = _end_s(cr)
    if end_s != record.end_s:
        said = "no EndDate (billed until cancelled)" if end_s is None else f"EndDate {ts(end_s).isoformat()}"
        out.append(f"it has {said}, gpufleet's record ends the term at {ts(record.end_s).isoformat()}")
    return "; ".join(out)


def _not_the_order(cr: dict[str, Any], region: str, order: OrderRequest | None) -> str:
    """Why the reservation EC2 holds is not ``order`` ("" when it is): its region, instance type and count; without
    the order, against its own ``gpufleet:sku`` and ``gpufleet:gpus`` tags (the region is then not checked)."""
    if order is None:
        tags = {t.get("Key"): t.get("Value", "") for t in cr.get("Tags", [])}
        gpus = _int(tags.get("gpufleet:gpus"))
        if tags.get("gpufleet:sku") not in INSTANCE_TYPES or gpus is None or gpus <= 0:
            return "no gpufleet:sku and gpufleet:gpus tags naming what it should hold"
        order = OrderRequest(str(tags["gpufleet:sku"]), region, gpus, 0, 0)
    out = []
    if region != order.region_id:
        out.append(f"in {region}, approved in {order.region_id}")
    if order.sku_id in INSTANCE_TYPES:
        name = instance_type(order.sku_id).name
        if cr.get("InstanceType") != name:
            out.append(f"{str(cr.get('InstanceType'))[:40]}, approved {name}")
        count = instances_for(order.sku_id, order.units)
        if _int(cr.get("TotalInstanceCount")) != count:
            out.append(f"{str(cr.get('TotalInstanceCount'))[:20]} instances, approved {count}")
    return ", ".join(out)


def _end_s(cr: dict[str, Any]) -> int | None:
    end = cr.get("EndDate")
    try:
        return None if end is None or cr.get("EndDateType") == "unlimited" else epoch_s(end)
    except (TypeError, ValueError, OverflowError):
        return None


def _start_s(cr: dict[str, Any]) -> int | None:
    """A future-dated reservation's ``StartDate`` (one with a commitment or an original start: EC2 delivers it then);
    None for one made for now (its ``StartDate`` is when EC2 created it, not a start gpufleet asked for)."""
    if not cr.get("CommitmentInfo") and cr.get("OriginalStartDate") is None:
        return None
    try:
        return None if cr.get("StartDate") is None else epoch_s(cr["StartDate"])
    except (TypeError, ValueError, OverflowError):
        return None


def _past_end(cr: dict[str, Any], record: OrderRecord) -> str:
    """What EC2 holds past the recorded term's end ("" when its own ``EndDate`` is the record's or sooner: EC2 ends
    it), with the instances in use in it."""
    end_s = _end_s(cr)
    if end_s is not None and end_s <= record.end_s:
        return ""
    said = "no EndDate" if end_s is None else f"EndDate {ts(end_s).isoformat()}"
    total, free = _int(cr.get("TotalInstanceCount")), _int(cr.get("AvailableInstanceCount"))
    used = "?" if total is None or free is None else str(total - free)
    return (f"EC2 holds it with {said}, past the recorded term's end {ts(record.end_s).isoformat()}; {used} of "
            f"{total} instances in use")  # fmt: skip


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _order(cr: dict[str, Any], region: str) -> ProviderOrder:
    tags = {t.get("Key"): t.get("Value", "") for t in cr.get("Tags", [])}
    return ProviderOrder(
        str(cr.get("CapacityReservationId", "")),
        str(tags.get(KEY_TAG, "")),
        str(tags.get("gpufleet:sku", "")),
        region,
        int(tags.get("gpufleet:gpus") or 0),
        int(tags.get("gpufleet:term-months") or 0),
        int(tags.get("gpufleet:start-s") or epoch_s(cr.get("StartDate", 0))),
    )
