"""Azure capacity reservations behind the provider port.

Contract (the port's): ``submit(key, order)`` looks the order up, then creates it. Azure holds exactly one
reservation per VM size in a capacity reservation group, so each order gets a group of its own; both are named
from the key (``resource_name``), and ARM's PUT is idempotent by name: a retry after an unknown outcome finds or
re-puts the same resources, never a second reservation. The key, SKU, GPUs, term and start are tags of the
reservation (``gpufleet-key``, ...); a reservation of that name without this key (gpufleet did not create it, or its
tag was stripped or edited at Azure) is a ``blocked`` refusal, not an order: held for a person, never cancelled (a
reservation under gpufleet's name may be the order's, billed); so is one carrying the key that does not hold the order
(location, VM size, VMs).

- A start more than six calendar months ahead (:data:`FUTURE_MAX_MONTHS`) is not submitted yet (``earliest_submit_s``:
  the service keeps it approved until a day after its window opens). A start at least :data:`FUTURE_MIN_DAYS` days
  ahead is a **future capacity reservation** (``properties.scheduleProfile.start``, the start date; Azure evaluates it: Pending, Approved,
  Committed, then Live or PartiallyFulfilled; Declined or FulfillmentFailed). A start sooner than that, now or
  past, is a capacity reservation from now: Azure takes no start date under a week ahead, so the days before the
  start are paid for (at most :data:`FUTURE_MIN_DAYS`).
- A capacity reservation has no end at Azure (it is billed until deleted). gpufleet ends it: ``describe`` of a
  reservation whose term has passed by gpufleet's own record (``OrderRecord.end_s``: the store's start + term)
  deletes the reservation and its group and reports ``expired`` (``cancelled`` when it is still pending then: it
  delivered nothing within the term; a future one's ``scheduleProfile.start`` other than the record's is reported); a delete Azure refuses (a future reservation still
  inside its minimum commitment) leaves it ``active``, with the refusal as the reason, and is tried again on the next
  pass. Without a record nothing is deleted. Tags are editable at Azure by anyone with tag rights on the resource
  group: the ``gpufleet-end-s`` tag is only a cross-check (one that disagrees with the record, or is gone, is
  reported as the order state's ``warning``, never obeyed), and one that no longer reads as a number never stops a
  pass or a lookup. A ``sku.capacity`` other than the VMs approved (resized at Azure) is reported the same way.
- ``describe`` maps Azure's states onto the lifecycle: ``provisioningState`` Creating -> pending, Succeeded /
  Updating -> active, Failed / Canceled / Deleting -> cancelled; a future reservation
  follows ``instanceView.reservationStateInfo.reservationState`` (Pending / Approved / Committed -> pending, Live /
  PartiallyFulfilled -> active, Declined / FulfillmentFailed -> cancelled). A failed, declined or unfulfilled one
  holds nothing: it is deleted with its group (so no litter stays at Azure) and reported cancelled. A reservation
  that no longer exists is ``cancelled`` with provider state ``NotFound`` (the service ends an active one as
  expired). One whose read gets no answer, or a refusal (403), is absent from the answer (unknown this pass; the
  others are still described). A resource group or subscription that does not exist (ARM's ResourceGroupNotFound,
  SubscriptionNotFound: ``azure_resource_group`` is wrong) is not a reservation gone: ``describe`` raises that
  refusal and no order changes state; ``submit`` is refused for the moment (the reservation stays approved), and
  ``cancel`` fails rather than report a delete done.

Units are GPUs; Azure reserves whole VMs, ``ceil(units / 8)``. The order id is ``REGION/NAME`` (group and
reservation share the name). Not bought here: reserved instances or savings plans, the price side; a capacity
reservation alone is billed at pay-as-you-go rates from its creation (docs/providers.md).
"""

from __future__ import annotations

import calendar
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, timedelta
from typing import Any

from gpufleet.adapters.azure.session import CONFIG_NOT_FOUND, NOT_FOUND, ArmApi
from gpufleet.adapters.azure.vm_sizes import VM_SIZES, vm_size, vms_for
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
from gpufleet.adapters.resource_names import resource_name
from gpufleet.domain.reservations import term_seconds

log = logging.getLogger(__name__)

DAY_S = 86_400
FUTURE_MIN_DAYS = 7  # Azure's rules for a future capacity reservation's start (the SDK's ScheduleProfile):
FUTURE_MAX_MONTHS = 6  # at least 7 days and at most 6 months ahead
GROUPS = "capacityReservationGroups"
_PROVISIONING: dict[str, LifecycleState] = {
    "Creating": "pending",
    "Updating": "active",  # a change to a reservation that exists
    "Succeeded": "active",
    "Failed": "cancelled",
    "Canceled": "cancelled",
    "Deleting": "cancelled",
}
FAILED = frozenset({"Failed", "Declined", "FulfillmentFailed"})  # Azure's no: nothing is held
_FUTURE: dict[str, LifecycleState] = {
    **dict.fromkeys(("Pending", "Approved", "Committed"), "pending"),
    **dict.fromkeys(("Live", "PartiallyFulfilled"), "active"),
    **dict.fromkeys(("Declined", "FulfillmentFailed"), "cancelled"),
}


class AzureCapacityReservations:
    """The provider port (and its lifecycle) over Azure capacity reservations and future capacity reservations."""

    def __init__(self, api: ArmApi, *, now_s: Callable[[], int]) -> None:
        self._api = api
        self._now_s = now_s

    # ---- the port -----------------------------------------------------------------------------------------
    def earliest_submit_s(self, order: OrderRequest) -> int:
        """A future capacity reservation starts at most six calendar months ahead (Azure's rule): an order further
        out waits (approved) until a day after its window opens, rather than being bought from now."""
        start = _date(order.start_s)
        day = _add_months(start, -FUTURE_MAX_MONTHS)
        while _add_months(day, FUTURE_MAX_MONTHS) < start:
            day += timedelta(days=1)
        return _midnight_s(day + timedelta(days=1))  # a day's margin for Azure's own "today"

    def units_bought(self, sku_id: str, units: int) -> int:
        """GPUs of the whole VMs an order of ``units`` GPUs reserves (the approval values these)."""
        size = VM_SIZES.get(sku_id)
        return units if size is None else vms_for(sku_id, units) * size.gpus

    def submit(self, key: str, order: OrderRequest) -> ProviderOrder:
        if order.sku_id not in VM_SIZES:  # refused before any call: the reservation is cancelled with the reason
            raise ProviderRefused("sku_not_offered", f"Azure sells no VM size mapped for {order.sku_id}")
        found = self.find(key, order)  # first: an order placed before its region left the settings is still found
        if found is not None:
            return found
        if order.region_id not in self._api.config.regions:
            raise ProviderRefused("region_not_configured", f"{order.region_id} is not in azure_regions")
        return self.create(key, order)

    def create(self, key: str, order: OrderRequest) -> ProviderOrder:
        """PUT the order's group, then its reservation (both idempotent by name); no lookup first."""
        name, region = resource_name(key), order.region_id
        zone = self._api.config.zones.get(region)
        zones = {"zones": [zone]} if zone else {}
        self._api.call(f"{GROUPS}.createOrUpdate", "PUT", f"{GROUPS}/{name}", body={"location": region, **zones})
        self._api.call(
            "capacityReservations.createOrUpdate",
            "PUT",
            f"{GROUPS}/{name}/capacityReservations/{name}",
            body=self._body(key, order, zones),
        )
        return ProviderOrder(
            f"{region}/{name}", key, order.sku_id, region, order.units, order.term_months, order.start_s
        )

    def find(self, key: str, order: OrderRequest | None = None) -> ProviderOrder | None:
        """The order under its name. Without the key tag: ``name_taken`` (below). Given the ``order``, one carrying
        the key is adopted only when it holds the order (its location, VM size and VMs): anyone who can create a
        reservation in the resource group can name one so and tag it; one that is not the order is a ``blocked``
        ``name_taken`` refusal naming what differs, held for a person, never adopted or deleted."""
        name = resource_name(key)
        got = self._api.get("capacityReservations.get", f"{GROUPS}/{name}/capacityReservations/{name}")
        if got is None:
            return None
        tags = got.get("tags") or {}
        tagged = tags.get("gpufleet-key")
        if tagged != key:  # held for a person, never cancelled: a reservation under gpufleet's name may be billed
            said = "no gpufleet-key tag" if tagged is None else f"gpufleet-key {str(tagged)[:80]!r}"
            raise ProviderRefused(
                "name_taken",
                f"capacity reservation {name} (gpufleet's name for {key}) carries {said}: gpufleet did not create "
                "it, or its tag was edited at Azure; restore the tag (or delete the reservation) to resume",
                blocked=True,
            )
        differs = "" if order is None else _not_the_order(got, order)
        if differs:
            raise ProviderRefused(
                "name_taken",
                f"capacity reservation {name} carries gpufleet-key {key} but is not the order approved ({differs}): "
                "gpufleet did not create it, or it was modified at Azure; delete it (or restore it) to resume",
                blocked=True,
            )
        return ProviderOrder(
            f"{got.get('location', '')}/{name}",
            key,
            str(tags.get("gpufleet-sku", "")),
            str(got.get("location", "")),
            _int_tag(tags, "gpufleet-gpus") or 0,
            _int_tag(tags, "gpufleet-term-months") or 0,
            _int_tag(tags, "gpufleet-start-s") or 0,
        )

    def describe(
        self, order_ids: Sequence[str], records: Mapping[str, OrderRecord] | None = None
    ) -> dict[str, OrderState]:
        out: dict[str, OrderState] = {}
        for oid in order_ids:
            parts = oid.split("/")
            if len(parts) != 2 or not parts[1].startswith("gpufleet"):
                continue  # not an order of this provider: unknown
            name = parts[1]
            try:
                got = self._api.get(
                    "capacityReservations.get",
                    f"{GROUPS}/{name}/capacityReservations/{name}",
                    params={"$expand": "instanceView"},
                )
            except ProviderTimeout:
                continue  # no answer for this one: unknown this pass (absent), the others still described
            except ProviderRefused as exc:  # its read refused (403 on one group): unknown, the others still described
                if exc.code in CONFIG_NOT_FOUND:  # the settings' resource group is not there: no order can be read
                    raise
                log.warning("Azure order %s not described: %s", oid, exc)
                continue
            if got is None:
                out[oid] = OrderState(oid, "cancelled", "NotFound", "the reservation no longer exists at Azure")
                continue
            state, word = _state(got)
            if word in FAILED:  # nothing held: its group and record would stay at Azure as litter; deleted
                out[oid] = OrderState(oid, "cancelled", word, self._clear(oid))
                continue
            record = (records or {}).get(oid)
            end_s = None if record is None else record.end_s  # gpufleet's record decides, never the (editable) tags
            warning = "" if end_s is None else _tag_mismatch(got.get("tags") or {}, end_s)
            if record is not None:  # what Azure holds against what was approved (a PUT of sku.capacity by anyone)
                said = (warning, _capacity_mismatch(got, record), _start_mismatch(got, record))
                warning = "; ".join(w for w in said if w)
            if state == "pending" and record is not None and self._now_s() >= record.end_s:
                out[oid] = self._delete_undelivered(oid, got, word, record, warning)  # nothing delivered in the term
                continue
            if state == "active" and end_s and self._now_s() >= end_s:
                try:
                    self.cancel(oid)  # Azure bills it until deleted: its term is over
                except ProviderRefused as exc:
                    out[oid] = OrderState(
                        oid, "active", word, f"term over, delete refused: {exc.code}", warning=warning
                    )
                    continue
                except ProviderTimeout:
                    out[oid] = OrderState(
                        oid, "active", word, "term over, delete unanswered: tried again", warning=warning
                    )
                    continue
                state = "expired"
                ended = (f"Azure holds no end ({(got.get('sku') or {}).get('capacity')} VMs, billed until deleted), "
                         f"the recorded term ended at {end_s}: deleted by gpufleet")  # fmt: skip
                out[oid] = OrderState(oid, state, word, warning=warning, ended=ended[:300])
                continue
            out[oid] = OrderState(oid, state, word, warning=warning)
        return out

    def _delete_undelivered(
        self, oid: str, got: dict[str, Any], word: str, record: OrderRecord, warning: str
    ) -> OrderState:
        """Delete a reservation still pending at the recorded term's end (a future one never fulfilled, or its start
        moved past the term): whatever Azure would deliver later is outside the approved term. A delete refused (a
        committed one inside its minimum commitment) or unanswered: still pending, said in the warning, tried again."""
        start = ((got.get("properties") or {}).get("scheduleProfile") or {}).get("start")
        found = (f"never delivered within the recorded term (ended {_date(record.end_s).isoformat()}): {word[:40]}, "
                 f"scheduleProfile.start {str(start)[:40]}")  # fmt: skip
        return cancel_undelivered(lambda: self.cancel(oid), oid, word, found, warning, verb="delete")

    # ---- beyond the port ----------------------------------------------------------------------------------
    def cancel(self, order_id: str) -> None:
        """Delete the reservation, then its group (both gone when already gone)."""
        name = order_id.rsplit("/", maxsplit=1)[-1]
        for what, path in (
            ("capacityReservations.delete", f"{GROUPS}/{name}/capacityReservations/{name}"),
            (f"{GROUPS}.delete", f"{GROUPS}/{name}"),
        ):
            try:
                self._api.call(what, "DELETE", path)
            except ProviderRefused as exc:
                if exc.code not in NOT_FOUND:
                    raise

    def _clear(self, order_id: str) -> str:
        try:
            self.cancel(order_id)
        except (ProviderRefused, ProviderTimeout) as exc:
            return f"failed at Azure; its delete did not go through ({exc}): delete the group by hand"
        return "failed at Azure; deleted"

    # ---- helpers ------------------------------------------------------------------------------------------
    def _body(self, key: str, order: OrderRequest, zones: dict[str, Any]) -> dict[str, Any]:
        end_s = order.start_s + term_seconds(order.term_months)
        tags = {
            "gpufleet-key": key,
            "gpufleet-sku": order.sku_id,
            "gpufleet-gpus": str(order.units),
            "gpufleet-term-months": str(order.term_months),
            "gpufleet-start-s": str(order.start_s),
            "gpufleet-end-s": str(end_s),
        }
        body: dict[str, Any] = {
            "location": order.region_id,
            "sku": {"name": vm_size(order.sku_id).name, "capacity": vms_for(order.sku_id, order.units)},
            "tags": tags,
            **zones,
        }
        now_s = self._now_s()
        if _date(order.start_s) > _add_months(_date(now_s), FUTURE_MAX_MONTHS):
            raise ProviderRefused("start_too_far", "Azure takes a start at most six months ahead", retryable=True)
        if order.start_s - now_s >= FUTURE_MIN_DAYS * DAY_S:
            body["properties"] = {"scheduleProfile": {"start": _date(order.start_s).isoformat()}}
        return body


def _int_tag(tags: dict[str, Any], name: str) -> int | None:
    """A tag gpufleet wrote as an integer; None when absent or no longer one (tags are editable at Azure by anyone
    with tag rights: an edited tag must not break the lookup or the reconciler pass)."""
    try:
        return int(str(tags[name]))
    except (KeyError, TypeError, ValueError):
        return None


def _tag_mismatch(tags: dict[str, Any], end_s: int) -> str:
    """What the ``gpufleet-end-s`` tag says against gpufleet's record of the term's end ("" when they agree)."""
    tagged = _int_tag(tags, "gpufleet-end-s")
    if tagged == end_s:
        return ""
    said = "is gone" if "gpufleet-end-s" not in tags else f"says {str(tags['gpufleet-end-s'])[:40]!r}"
    return f"tag gpufleet-end-s {said}, gpufleet's record ends the term at {end_s}: the record decides (tag edited?)"


def _capacity_mismatch(got: dict[str, Any], record: OrderRecord) -> str:
    """The VMs Azure holds (``sku.capacity``) against those approved in gpufleet's record ("" when they agree, or
    when the record names no SKU Azure maps): reported, the reservation followed as Azure holds it."""
    if record.units <= 0 or record.sku_id not in VM_SIZES:
        return ""
    approved = vms_for(record.sku_id, record.units)
    held = (got.get("sku") or {}).get("capacity")
    if held == approved:
        return ""
    return f"Azure holds {str(held)[:20]} VMs, {approved} approved ({record.units} GPUs): resized at Azure?"


def _not_the_order(got: dict[str, Any], order: OrderRequest) -> str:
    """Why the reservation Azure holds under the order's name is not ``order`` ("" when it is): its location, VM size
    and VMs."""
    out = []
    where = str(got.get("location", ""))
    if where.replace(" ", "").lower() != order.region_id.replace(" ", "").lower():
        out.append(f"in {where[:40]}, approved in {order.region_id}")
    if order.sku_id in VM_SIZES:
        sku = got.get("sku") or {}
        want = vm_size(order.sku_id).name
        if str(sku.get("name", "")).lower() != want.lower():
            out.append(f"{str(sku.get('name'))[:60]}, approved {want}")
        vms = vms_for(order.sku_id, order.units)
        if sku.get("capacity") != vms:
            out.append(f"{str(sku.get('capacity'))[:20]} VMs, approved {vms}")
    return ", ".join(out)


def _start_mismatch(got: dict[str, Any], record: OrderRecord) -> str:
    """A future reservation's ``scheduleProfile.start`` (a date) against the record's start ("" when they agree, for
    a reservation from now, or without a recorded start): one moved later delivers less of the approved term."""
    start = ((got.get("properties") or {}).get("scheduleProfile") or {}).get("start")
    if start is None or record.start_s is None:
        return ""
    want = _date(record.start_s).isoformat()
    if str(start)[:10] == want:
        return ""
    return f"its scheduleProfile.start is {str(start)[:40]}, gpufleet's record starts the term on {want}"


def _date(seconds: int) -> date:
    return datetime.fromtimestamp(seconds, UTC).date()


def _midnight_s(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp())


def _add_months(day: date, months: int) -> date:
    """The same day ``months`` calendar months later (earlier when negative), the month's last day if shorter."""
    year, month0 = divmod(day.month - 1 + months, 12)
    year += day.year
    return date(year, month0 + 1, min(day.day, calendar.monthrange(year, month0 + 1)[1]))


def _state(got: dict[str, Any]) -> tuple[LifecycleState, str]:
    props = got.get("properties") or {}
    future = ((props.get("instanceView") or {}).get("reservationStateInfo") or {}).get("reservationState")
    if (props.get("scheduleProfile") or {}).get("start") and future:
        return _FUTURE.get(str(future), "pending"), str(future)
    word = str(props.get("provisioningState") or "Creating")
    return _PROVISIONING.get(word, "pending"), word
