"""Compute Engine reservations behind the provider port.

Contract (the port's): ``submit(key, order)`` first looks the order up, then creates it. The resource's *name* is
derived from the key (``resource_name``): a retry after an unknown outcome finds the first order by name, and an
insert answered ``alreadyExists`` is looked up, never bought twice. Each mutation carries a fresh ``requestId``,
which the HTTP retries of that one call reuse (GCP runs a request id once); it is not derived from the key because
GCP answers a request id it has seen with its first operation, a failed one included, so a key refused for lack of
capacity could not be tried again. A resource of that name whose description does not carry the key (gpufleet did not
create it, or its description was edited at GCP: anyone with the update permission can) is a ``blocked`` refusal
(``name_taken``), held for a person and never cancelled, as Azure's edited tag: the name is derived from the key with
its hash, so it may well be the order, billed. One carrying the key is adopted by ``submit`` only when it holds the
order (region, machine type, machines: ``held.not_the_order``); else ``name_taken`` too.

- A start in the future is a **future reservation** (``futureReservations.insert``: ``timeWindow`` from start to
  start + term, submitted for GCP's approval, its auto-created reservations deleted at the end); a start now or
  past is a **reservation** (``reservations.insert``: ``specificReservation`` of whole machines, deleted by GCP at
  ``deleteAtTime`` = start + term).
- The insert's zonal operation is followed for up to ``op_wait_s``: an operation that ends in an error is a
  refusal (retryable when it is about the moment: ``ZONE_RESOURCE_POOL_EXHAUSTED``, no capacity now, or an
  ``httpErrorStatusCode`` of 429 or 5xx, GCP's own failure; ``blocked`` for a permission: an ``httpErrorStatusCode``
  of 401 or 403 or a permission code), unless the resource exists under its name with the key: GCP holds (and bills)
  it whatever the operation said, so it is the order (no answer to that lookup: unknown outcome); one still running returns the order as pending with the operation's name
  (``ProviderOrder.operation_id``), and ``describe``, given it back in the order's record, reads the operation first:
  one that ended in an error is the order ``failed`` with that refusal when the resource is gone or going (GCP
  removed the resource it was creating: not an order someone deleted); a resource still there is described by its
  own state, the operation's error in the state's ``warning``. An order found by its name after a lost answer gets its running insert from
  ``zoneOperations.list`` (by ``targetLink``; a list refused or unanswered: none, the order followed by its resource).
  What GCP holds is checked against gpufleet's record (``OrderRecord``: machines approved, the term's end; for a
  delivered future reservation, its auto-created reservations too, each read): a count or
  an end that differs, or no end at all, is the state's ``warning`` (followed as GCP holds it, reported). At the
  recorded term's end, what GCP still holds past it (``deleteAtTime`` / the window's end gone or later) is ended by
  gpufleet (``held.py``: the reservation, or a future reservation's auto-created ones, deleted whatever runs in them)
  and reported ``expired`` with ``OrderState.ended``; a future reservation still pending then (its window moved later,
  or never fulfilled: it delivered nothing within the term) is cancelled and reported ``cancelled`` with ``ended``.
  A future reservation left FAILED by its failed insert is deleted
  before the failure is reported, so the order can be placed again under its name.
- ``describe`` maps GCP's states onto the lifecycle: a reservation CREATING -> pending, READY / UPDATING -> active,
  DELETING / INVALID -> cancelled; a future reservation DRAFTING / PENDING_APPROVAL / APPROVED / COMMITTED /
  PROCURING / PROVISIONING / PENDING_AMENDMENT_APPROVAL -> pending, FULFILLED / FAILED_PARTIALLY_FULFILLED ->
  active (expired once its window has ended), DECLINED / CANCELLED / FAILED -> cancelled. A resource that no longer
  exists (GCP deleted it at its end, someone deleted it, or its creation failed) is ``cancelled`` with provider
  state ``NOT_FOUND``; the service ends an *active* reservation so reported as expired. An order whose read gets
  no answer, or a refusal (403), is absent from the answer (unknown this pass; the others are still described). A
  ``notFound`` naming the project or the zone rather than the resource (``gcp_project`` is wrong) is not a resource
  gone: ``describe`` raises that refusal and no order changes state; ``submit`` is refused for the moment.

Units are GPUs; GCP reserves whole machines, so ``ceil(units / GPUs per machine)`` are reserved. The order id is
``ZONE/reservations/NAME`` or ``ZONE/futureReservations/NAME``. Not bought here: committed use discounts (the
price side of a commitment); a reservation alone is billed at on-demand rates (docs/providers.md).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.adapters.gcp.held import (
    auto_created,
    epoch_s,
    held_against_record,
    never_delivered,
    not_the_order,
    past_record_end,
    rfc3339,
)
from gpufleet.adapters.gcp.machines import MACHINE_TYPES, machine_type, machines_for
from gpufleet.adapters.gcp.session import CONFIG_NOT_FOUND, NOT_FOUND, PERMISSION_CODES, GoogleApi
from gpufleet.adapters.http_retry import RETRY_STATUS
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

CAPACITY_CODES = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"})
KINDS = ("reservations", "futureReservations")
_RESERVATION: dict[str, LifecycleState] = {
    "CREATING": "pending",
    "READY": "active",
    "UPDATING": "active",
    "DELETING": "cancelled",
    "INVALID": "cancelled",
}
_FUTURE: dict[str, LifecycleState] = {
    **dict.fromkeys(
        ("DRAFTING", "PENDING_APPROVAL", "APPROVED", "COMMITTED", "PROCURING", "PROVISIONING",
         "PENDING_AMENDMENT_APPROVAL"),
        "pending",
    ),
    **dict.fromkeys(("FULFILLED", "FAILED_PARTIALLY_FULFILLED"), "active"),
    **dict.fromkeys(("DECLINED", "CANCELLED", "FAILED"), "cancelled"),
}  # fmt: skip


def request_id() -> str:
    """A new request id: one per mutation, reused only by that call's own HTTP retries."""
    return str(uuid.uuid4())


__all__ = ["GcpReservations", "epoch_s", "request_id", "resource_name", "rfc3339"]


class GcpReservations:
    """The provider port (and its lifecycle) over Compute Engine reservations and future reservations."""

    def __init__(
        self,
        api: GoogleApi,
        *,
        now_s: Callable[[], int],
        specific_reservation_required: bool = False,
        op_wait_s: float = 20.0,
        poll_s: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._now_s = now_s
        self._specific = specific_reservation_required
        self._op_wait_s = op_wait_s
        self._poll_s = poll_s
        self._sleep = sleep
        self._monotonic = monotonic

    # ---- the port -----------------------------------------------------------------------------------------
    def units_bought(self, sku_id: str, units: int) -> int:
        """GPUs of the whole machines an order of ``units`` GPUs reserves (the approval values these)."""
        mt = MACHINE_TYPES.get(sku_id)
        return units if mt is None else machines_for(sku_id, units) * mt.gpus

    def submit(self, key: str, order: OrderRequest) -> ProviderOrder:
        if order.sku_id not in MACHINE_TYPES:  # refused before any call: the reservation is cancelled with the reason
            raise ProviderRefused("sku_not_offered", f"GCP sells no machine type mapped for {order.sku_id}")
        found = self.find(key, order)
        if found is not None:
            return found
        return self.create(key, order)

    def create(self, key: str, order: OrderRequest) -> ProviderOrder:
        """Insert the reservation (or future reservation) under its name and request id; no lookup first."""
        kind = "futureReservations" if order.start_s > self._now_s() else "reservations"
        zone = self._api.config.zone(order.region_id)
        name = resource_name(key)
        body = self._body(kind, name, key, order)
        path = f"zones/{zone}/{kind}"
        try:
            op = self._api.call(f"{kind}.insert", "POST", path, params={"requestId": request_id()}, body=body)
        except ProviderRefused as exc:
            if exc.code != "alreadyExists":
                raise
            found = self.find(key, order)
            if found is None:  # exists, but not as an order of this key
                raise
            return found
        try:
            op = self._follow(zone, op, f"{kind}.insert")
        except ProviderRefused as refused:  # the operation's error; the resource decides whether GCP holds the order
            held = self._held(zone, kind, name, key, order.region_id, refused)
            if held is None:
                raise
            return held
        running = None if op.get("status") == "DONE" else str(op.get("name") or "") or None
        return ProviderOrder(f"{zone}/{kind}/{name}", key, order.sku_id, order.region_id, order.units,
                             order.term_months, order.start_s, running)  # fmt: skip

    def find(self, key: str, order: OrderRequest | None = None) -> ProviderOrder | None:
        """The order under its name in any configured region's zone. A resource there whose description does not
        carry the key: ``name_taken`` (below). Given the ``order``, one carrying the key is adopted only when it holds
        the order (its region, machine type and machines: the description is readable by anyone who lists
        reservations, and can be copied onto another resource); resources none of which is the order are a ``blocked``
        ``name_taken`` refusal naming what differs, held for a person, never adopted or cancelled."""
        name = resource_name(key)
        why = ""
        for region in self._api.config.regions:
            zone = self._api.config.zone(region)
            for kind in KINDS:
                got = self._api.get(f"{kind}.get", f"zones/{zone}/{kind}/{name}")
                if got is None:
                    continue
                meta = _meta(got)
                if meta.get("key") != key:  # held for a person, never cancelled: it may be the order's, billed
                    raise ProviderRefused(
                        "name_taken",
                        f"{zone}/{kind}/{name} (gpufleet's name for {key}) does not carry this key in its description: "
                        "gpufleet did not create it, or its description was edited at GCP; restore the description "
                        "(or delete the resource) to resume",
                        blocked=True,
                    )
                differs = "" if order is None else not_the_order(kind, got, region, order)
                if differs:
                    why = why or f"{zone}/{kind}/{name}: {differs}"
                    continue
                return _order(meta, f"{zone}/{kind}/{name}", region, self._running_insert(zone, got))
        if why:
            raise ProviderRefused(
                "name_taken",
                f"{why[:300]}: it carries {key} in its description but is not the order approved (gpufleet did not "
                "create it, or it was modified at GCP); delete it (or restore it) to resume",
                blocked=True,
            )
        return None

    def _held(
        self, zone: str, kind: str, name: str, key: str, region: str, refused: ProviderRefused
    ) -> ProviderOrder | None:
        """The order under its name after its insert's operation ended in ``refused``: GCP holds (and bills) a
        resource that exists whatever the operation said, so it is the order (a warning logged); None when it does
        not exist. No answer: unknown (``ProviderTimeout``: the reservation waits for the next pass's ``find``)."""
        try:
            got = self._api.get(f"{kind}.get", f"zones/{zone}/{kind}/{name}")
        except ProviderTimeout as exc:
            raise ProviderTimeout(f"{kind}.insert failed ({refused}); whether {name} exists is unknown") from exc
        if got is None:
            return None
        meta = _meta(got)
        if meta.get("key") != key:
            return None
        log.warning(
            "GCP %s/%s/%s exists though its insert failed (%s): recorded as the order", zone, kind, name, refused
        )
        return _order(meta, f"{zone}/{kind}/{name}", region)

    def _running_insert(self, zone: str, resource: dict[str, Any]) -> str | None:
        """The name of the insert operation still running on a resource found by its name (an answer lost: the order
        is recorded from ``find``, and a later failure of that insert must read as the failure it is); None when none
        runs, or when the operations cannot be listed (the order is then followed by its resource alone)."""
        link = str(resource.get("selfLink") or "")
        if not link:
            return None
        query = {"filter": f'(targetLink = "{link}") (operationType = "insert")'}
        try:
            ops = self._api.call("zoneOperations.list", "GET", f"zones/{zone}/operations", params=query)
        except (ProviderRefused, ProviderTimeout) as exc:
            log.warning("GCP operations on %s not listed: %s", link, exc)
            return None
        running = [op for op in ops.get("items") or [] if isinstance(op, dict) and op.get("status") != "DONE"]
        return (str(running[-1].get("name") or "") or None) if running else None

    def describe(
        self, order_ids: Sequence[str], records: Mapping[str, OrderRecord] | None = None
    ) -> dict[str, OrderState]:
        out: dict[str, OrderState] = {}
        for oid in order_ids:
            parts = oid.split("/")
            if len(parts) != 3 or parts[1] not in KINDS:
                continue  # not an order of this provider: unknown
            zone, kind, name = parts
            record = (records or {}).get(oid)
            refusal = None
            try:
                if record is not None and record.operation_id:  # the insert's outcome: a failed one removed it ...
                    op = self._api.get("zoneOperations.get", f"zones/{zone}/operations/{record.operation_id}")
                    refusal = None if op is None else _op_refusal(op, f"{kind}.insert")
                got = self._api.get(f"{kind}.get", f"zones/{zone}/{kind}/{name}")
                autos = self._autos(zone, got) if got is not None and kind == "futureReservations" else {}
            except ProviderTimeout:
                continue  # no answer for this one: unknown this pass, the others still described
            except ProviderRefused as exc:  # its read refused (403 on one zone): unknown, the others still described
                if exc.code in CONFIG_NOT_FOUND:  # the settings' project (or the order's zone) is not there
                    raise
                log.warning("GCP order %s not described: %s", oid, exc)
                continue
            if got is None:
                state: LifecycleState = "cancelled"
                word, why = "NOT_FOUND", "the resource no longer exists at GCP"
            elif kind == "reservations":
                word, why = str(got.get("status") or "CREATING"), ""
                state = _RESERVATION.get(word, "pending")
            else:
                word, why = str((got.get("status") or {}).get("procurementStatus") or "DRAFTING"), ""
                state = _FUTURE.get(word, "pending")
                end = (got.get("timeWindow") or {}).get("endTime")
                if state == "active" and end and self._now_s() >= epoch_s(str(end)):
                    state = "expired"
            if refusal is not None and state == "cancelled":  # gone or going: its failed operation says why
                if got is not None and kind == "futureReservations":  # one left FAILED holds nothing, but its name
                    try:  # would be found as the order by the next submission: deleted, as Azure deletes a failed one
                        self._delete_future(zone, name)
                    except (ProviderRefused, ProviderTimeout) as exc:
                        log.warning("GCP order %s failed; its leftover not deleted (tried again): %s", oid, exc)
                        continue  # unknown this pass: not placed again while the leftover holds the name
                out[oid] = OrderState(oid, "failed", refusal.code, refusal.message, refusal=refusal)
                continue
            # ... unless the resource is there: GCP holds (and bills) it whatever its operation said
            said = (
                [] if refusal is None else [f"its insert operation ended in {refusal}, yet it exists: followed by it"]
            )
            if got is not None and record is not None:
                said += held_against_record(kind, got, record, autos)
            warning, ended = "; ".join(said), ""
            if (
                got is not None
                and record is not None
                and state in ("active", "expired")
                and self._now_s() >= record.end_s
            ):
                found = past_record_end(kind, got, record, autos)  # GCP bills it past the term: gpufleet ends it
                if found:
                    try:
                        ended = f"{found}: {self._end(zone, kind, name, sorted(autos))}"
                    except (ProviderRefused, ProviderTimeout) as exc:
                        said_exc = exc.code if isinstance(exc, ProviderRefused) else "unanswered"
                        out[oid] = OrderState(oid, "active", word, f"term over, delete failed ({said_exc}): tried "
                                              "again", warning=warning)  # fmt: skip
                        continue
                    state = "expired"
            elif got is not None and record is not None and _undelivered_at_term(kind, state, self._now_s(), record):
                out[oid] = self._cancel_undelivered(oid, word, never_delivered(got, record), warning)
                continue
            out[oid] = OrderState(oid, state, word, why, warning=warning, ended=ended)
        return out

    def _cancel_undelivered(self, oid: str, word: str, found: str, warning: str) -> OrderState:
        """Cancel a future reservation still pending at the recorded term's end (``found``: what GCP holds). One
        GCP will not cancel (PROVISIONING) or no answer: still pending, said in the warning, tried on each pass."""
        return cancel_undelivered(lambda: self.cancel(oid), oid, word, found, warning)

    def _autos(self, zone: str, got: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """A future reservation's auto-created reservations that exist (``status.autoCreatedReservations``: what GCP
        bills once it delivered), by name; one gone (GCP deleted it at its end) is left out."""
        out = {}
        for each in auto_created(got, zone):
            res = self._api.get("reservations.get", f"zones/{zone}/reservations/{each}")
            if res is not None:
                out[each] = res
        return out

    def _end(self, zone: str, kind: str, name: str, autos: list[str]) -> str:
        """End an order at gpufleet's recorded term: delete the reservation (whatever VMs run in it: they run on, on
        demand, as Azure's path deletes at the recorded end whatever uses it), or a future reservation's auto-created
        reservations ``autos`` (what is billed; the future reservation, a request, is left). One already gone is
        done."""
        names = [name] if kind == "reservations" else autos
        for each in names:
            try:
                self.cancel(f"{zone}/reservations/{each}")
            except ProviderRefused as exc:
                if exc.code not in NOT_FOUND:
                    raise
        if kind == "reservations":
            return "deleted by gpufleet (the VMs in it run on, on demand)"
        return f"its auto-created reservations {names} deleted by gpufleet" if names else "no auto-created reservation"

    # ---- beyond the port ----------------------------------------------------------------------------------
    def resize(self, order_id: str, machines: int) -> None:
        """Resize a reservation to ``machines`` VMs (``reservations.resize``)."""
        zone, kind, name = order_id.split("/")
        if kind != "reservations":
            raise ProviderRefused("invalid", f"{order_id}: only a reservation can be resized")
        op = self._api.call("reservations.resize", "POST", f"zones/{zone}/reservations/{name}/resize",
                            params={"requestId": request_id()}, body={"specificSkuCount": str(machines)})  # fmt: skip
        self._follow(zone, op, "reservations.resize")

    def _delete_future(self, zone: str, name: str) -> None:
        """Delete a future reservation that holds nothing (one already gone is done)."""
        path = f"zones/{zone}/futureReservations/{name}"
        try:
            op = self._api.call("futureReservations.delete", "DELETE", path, params={"requestId": request_id()})
        except ProviderRefused as exc:
            if exc.code in NOT_FOUND:
                return
            raise
        self._follow(zone, op, "futureReservations.delete")

    def cancel(self, order_id: str) -> None:
        """Delete a reservation, or cancel a future reservation."""
        zone, kind, name = order_id.split("/")
        rid = request_id()
        if kind == "reservations":
            op = self._api.call("reservations.delete", "DELETE", f"zones/{zone}/reservations/{name}",
                                params={"requestId": rid})  # fmt: skip
        else:
            op = self._api.call("futureReservations.cancel", "POST", f"zones/{zone}/futureReservations/{name}/cancel",
                                params={"requestId": rid})  # fmt: skip
        self._follow(zone, op, f"{kind}.cancel")

    # ---- helpers ------------------------------------------------------------------------------------------
    def _body(self, kind: str, name: str, key: str, order: OrderRequest) -> dict[str, Any]:
        machines = str(machines_for(order.sku_id, order.units))
        props = {"machineType": machine_type(order.sku_id).name}
        end = rfc3339(order.start_s + term_seconds(order.term_months))
        meta = {"key": key, "sku": order.sku_id, "gpus": order.units, "term_months": order.term_months,
                "start_s": order.start_s}  # fmt: skip
        common = {"name": name, "description": json.dumps({"gpufleet": meta}, sort_keys=True),
                  "specificReservationRequired": self._specific}  # fmt: skip
        if kind == "reservations":
            return {**common, "specificReservation": {"count": machines, "instanceProperties": props},
                    "deleteAtTime": end}  # fmt: skip
        return {
            **common,
            "specificSkuProperties": {"instanceProperties": props, "totalCount": machines},
            "timeWindow": {"startTime": rfc3339(order.start_s), "endTime": end},
            "planningStatus": "SUBMITTED",
            "autoDeleteAutoCreatedReservations": True,
            "autoCreatedReservationsDeleteTime": end,
        }

    def _follow(self, zone: str, op: dict[str, Any], what: str) -> dict[str, Any]:
        """Wait up to ``op_wait_s`` for the operation; raise its error as a refusal; return it when done or waited."""
        deadline = self._monotonic() + self._op_wait_s
        while op.get("status") != "DONE" and self._monotonic() < deadline:
            self._sleep(self._poll_s)
            op = self._api.call("zoneOperations.get", "GET", f"zones/{zone}/operations/{op.get('name', '')}")
        refusal = _op_refusal(op, what)
        if refusal is not None:
            raise refusal
        return op


def _op_refusal(op: dict[str, Any], what: str) -> ProviderRefused | None:
    """A done operation's error as the refusal it is; None while it runs or when it succeeded."""
    error = op.get("error")
    errors = error.get("errors") if isinstance(error, dict) else None
    if op.get("status") != "DONE" or not errors:
        return None
    first = errors[0] if isinstance(errors, list) and isinstance(errors[0], dict) else {}
    code = str(first.get("code") or "OPERATION_FAILED")
    status = _int(op.get("httpErrorStatusCode"))
    # a permission on our side (403 inside the operation: a role the service account lacks) holds the order
    blocked = code in PERMISSION_CODES or status in (401, 403)
    # an operation GCP failed on its side (5xx, 429: "try again") is about the moment, as no capacity is
    moment = code in CAPACITY_CODES or status in RETRY_STATUS
    return ProviderRefused(code, f"{what}: {first.get('message', '')}", retryable=moment, blocked=blocked)


def _undelivered_at_term(kind: str, state: LifecycleState, now_s: int, record: OrderRecord) -> bool:
    """A future reservation still pending at the recorded term's end: it delivered nothing within the approved term."""
    return kind == "futureReservations" and state == "pending" and now_s >= record.end_s


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _meta(resource: dict[str, Any]) -> dict[str, Any]:
    try:
        meta = json.loads(str(resource.get("description") or "{}")).get("gpufleet")
    except (ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _order(meta: dict[str, Any], order_id: str, region: str, operation_id: str | None = None) -> ProviderOrder:
    return ProviderOrder(
        order_id,
        str(meta.get("key", "")),
        str(meta.get("sku", "")),
        region,
        int(meta.get("gpus") or 0),
        int(meta.get("term_months") or 0),
        int(meta.get("start_s") or 0),
        operation_id,
    )
