"""A stateful fake of Azure Resource Manager's capacity reservation calls (Microsoft.Compute), on loopback HTTP,
checked against Microsoft's own SDK (azure-mgmt-compute: its request builders and models, read by arm_models.py).

Served under ``/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.Compute/``: capacityReservationGroups
createOrUpdate/get/delete, capacityReservations createOrUpdate/get/delete/listByCapacityReservationGroup; and under
``/subscriptions/{sub}/providers/Microsoft.Compute/locations/{location}/``, usages (usage.list: the compute quotas a
test seeds with ``set_usage``). A route is found by (HTTP method, URL template) among the SDK's request builders; a path of another SDK route (not faked) or of
none is a violation, answered 404. Every request must carry the builders' default ``api-version`` and only the query
parameters the builder sends (an enum-typed one, ``$expand``, one of its known values); ``$skiptoken`` is accepted
where the fake put it in a ``nextLink`` (the SDK follows nextLink verbatim). Request bodies and every response
(errors too, as ``CloudError``) are checked against the SDK models (arm_models.check) and each response is read back
through the SDK's models (arm_models.sdk_reads). A broken request is kept in ``violations`` and answered 400; a broken
response is the fake's own bug (500). ARM's own refusals are answered ``{"error": {"code", "message"[, "target"]}}``
without a violation.

Behaviour. From the SDK's docstrings: a group takes only tags and sharingProfile as changes; a group is deleted only
when it holds no reservation; ``sku.name`` and ``sku.capacity`` are required; a Future reservation (a
``scheduleProfile`` with only ``start``) starts at least 7 days and at most 6 months after ``now``, gets
``minimumCommitmentDays`` (a default if not given) and a read-only ``modifiableUntil``, and is deletable while its
``reservationState`` is Pending, Declined, FulfillmentFailed or Approved, and in Committed, Live or PartiallyFulfilled
only once ``minimumCommitmentDays`` have passed since its start date. From ARM's conventions (Microsoft's resource
provider contract): PUT is idempotent by name (201 on create, 200 after), ``location`` is required (LocationRequired),
a nested resource under a missing parent is 404 ParentResourceNotFound, a missing resource 404 ResourceNotFound, a
DELETE of a missing resource 204, no token 401 AuthenticationFailed.

Guessed (neither the SDK nor a public document says): a changed ``sku.name``, ``zones``, ``reservationType`` or
future-ness is 409 PropertyChangeNotAllowed; a reservation's location must equal its group's and its one zone be one
of a zonal group's zones (a regional group's reservations have none) else 400 InvalidParameter naming the field; no
capacity (``refuse_capacity``) is a synchronous 409 ZonalAllocationFailed (a zonal reservation) or AllocationFailed
(a regional one) on a create or a capacity increase of an immediate reservation (a Future one is not allocated at
its PUT: a test declines it with ``set_reservation_state``); the default commitment is 30 days and
``modifiableUntil`` is 7 days before the start; a Future reservation's capacity or start cannot change after
``modifiableUntil`` or while committed; a refused Future delete or update, a PUT changing capacity or schedule while
provisioningState is not terminal, and deleting a group that holds reservations are 409 OperationNotAllowed (tags
always change); DELETE answers 200 without a body and the resource is gone at once (no 202 + polling); a throttled
call is 429 TooManyRequests with ``Retry-After: 1``; ARM names match case-insensitively; any resource group exists
unless a test names those that do (``only_resource_groups``): a call under another answers 404 ResourceGroupNotFound,
as ARM answers any call under a missing resource group.
The PUT answers no Azure-AsyncOperation or Location header: the SDK's poller polls the resource itself until its
provisioningState is terminal (``set_provisioning_state``, or ``provision_instantly()`` for a Succeeded answer).
The fake's clock ``now`` is the real time at reset unless a test sets it; it never moves by itself.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

from azure.mgmt.compute import models

from tests import loopback
from tests.integration.azure.arm_models import Route, check, check_page, find, sdk_reads
from tests.integration.azure.arm_rules import (
    RESERVATION_STATES,
    ZONES,
    ArmError,
    commitment_end,
    committed,
    desired,
    modifiable_until,
    not_found,
    same_location,
    stamp,
)

FAKED = frozenset(
    [f"capacityReservationGroups.{m}" for m in ("createOrUpdate", "get", "delete")]
    + [f"capacityReservations.{m}" for m in ("createOrUpdate", "get", "delete", "listByCapacityReservationGroup")]
    + ["usage.list"]
)
GROUP_TYPE = "Microsoft.Compute/capacityReservationGroups"
RESERVATION_TYPE = f"{GROUP_TYPE}/capacityReservations"
TERMINAL = frozenset({"Succeeded", "Failed", "Canceled"})
Res = dict[str, Any]
Answer = tuple[int, Any, float, dict[str, str]]
Key = tuple[str, str, str, str]


class FakeAzure:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str], Any]] = []  # (method key, query, JSON body or None)
        self.violations: list[str] = []
        self.groups: dict[tuple[str, str, str], Res] = {}  # (subscription, rg, group), lower case -> record
        self.reservations: dict[tuple[str, str, str, str], Res] = {}  # (..., reservation) -> record, in order
        self.refused: dict[str, str | None] = {}  # sku name (lower case) -> the error code to answer, or the default
        self.throttles: Counter[str] = Counter()
        self.delays: dict[str, float] = {}
        self.pages: dict[str, tuple[str, int]] = {}  # $skiptoken -> (the list's path, offset)
        self.usages: dict[tuple[str, str], dict[str, Res]] = {}  # (subscription or "*", location) -> name -> usage
        self.page_size = 100
        self.instant = False
        self.now = datetime.now(UTC)
        self.resource_groups: set[str] | None = None  # lower case; None: any resource group exists
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ---- test controls ------------------------------------------------------------------------------------------
    def set_now(self, now: datetime) -> None:
        self.now = now if now.tzinfo else now.replace(tzinfo=UTC)

    def set_provisioning_state(self, group: str, name: str, state: str, *, resource_group: str | None = None) -> None:
        with self.lock:
            r = self._find(group, name, resource_group)
            r["provisioningState"] = state
            r["provisioningTime"] = self.now

    def set_reservation_state(self, group: str, name: str, state: str, *, resource_group: str | None = None) -> None:
        """A Future reservation's ``reservationState`` (one of ``models.ReservationState``)."""
        if state not in RESERVATION_STATES:
            raise ValueError(f"{state!r} is not one of {sorted(RESERVATION_STATES)}")
        with self.lock:
            r = self._find(group, name, resource_group)
            if r["schedule"] is None:
                raise ValueError(f"{name} is not a Future capacity reservation")
            r["reservationState"] = state

    def refuse_capacity(self, vm_size: str, *, code: str | None = None) -> None:
        """No capacity for ``vm_size`` until ``allow_capacity``: ZonalAllocationFailed / AllocationFailed, or ``code``."""
        self.refused[vm_size.lower()] = code

    def allow_capacity(self, vm_size: str) -> None:
        self.refused.pop(vm_size.lower(), None)

    def only_resource_groups(self, *names: str) -> None:
        """Only these resource groups exist (until ``reset``): a call under another is 404 ResourceGroupNotFound."""
        self.resource_groups = {n.lower() for n in names}

    def throttle_next(self, method_key: str, times: int = 1) -> None:
        """The next ``times`` calls of ``method_key`` answer 429 with ``Retry-After: 1`` (nothing performed)."""
        self.throttles[_faked(method_key)] += times

    def delay_next(self, method_key: str, seconds: float) -> None:
        """The next call of ``method_key`` is performed, then answered ``seconds`` late."""
        self.delays[_faked(method_key)] = seconds

    def set_usage(
        self,
        location: str,
        name: str,
        limit: int,
        *,
        current: int = 0,
        localized: str | None = None,
        subscription: str = "*",
    ) -> None:
        """A compute quota of a location as ``usage.list`` reports it (``name.value``, its vCPU ``limit``)."""
        with self.lock:
            row = {"unit": "Count", "currentValue": current, "limit": limit,
                   "name": {"value": name, "localizedValue": localized or name}}  # fmt: skip
            self.usages.setdefault((subscription.lower(), location.lower()), {})[name] = row

    def set_page_size(self, size: int) -> None:
        self.page_size = size

    def provision_instantly(self, on: bool = True) -> None:
        """PUTs leave a reservation Succeeded at once (the SDK's poller then ends with the PUT's answer)."""
        self.instant = on

    # ---- inspection ---------------------------------------------------------------------------------------------
    def reservation(self, group: str, name: str, *, resource_group: str | None = None) -> Res:
        """The reservation as a GET with ``$expand=instanceView`` answers it."""
        with self.lock:
            return self._reservation_json(self._find(group, name, resource_group), expand=True)

    def group(self, group: str, *, resource_group: str | None = None) -> Res:
        with self.lock:
            hits = [g for k, g in self.groups.items() if k[2] == group.lower() and resource_group in (None, g["rg"])]
            if len(hits) != 1:
                raise KeyError(f"{len(hits)} capacity reservation groups {group}")
            return self._group_json(hits[0], expand=True)

    def reset(self) -> None:
        with self.lock:
            for c in (self.calls, self.requests, self.violations, self.groups, self.reservations, self.refused):
                c.clear()
            self.usages.clear()
            self.throttles.clear()
            self.delays.clear()
            self.pages.clear()
            self.page_size, self.instant, self.now = 100, False, datetime.now(UTC)
            self.resource_groups = None

    def _find(self, group: str, name: str, resource_group: str | None) -> Res:
        hits = [
            r
            for k, r in self.reservations.items()
            if k[2:] == (group.lower(), name.lower()) and resource_group in (None, r["rg"])
        ]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} capacity reservations {group}/{name}")
        return hits[0]

    # ---- server -------------------------------------------------------------------------------------------------
    def start(self) -> FakeAzure:
        self._server, self.url = loopback.serve_json_headers(self.handle)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    # ---- dispatch -----------------------------------------------------------------------------------------------
    def handle(self, verb: str, target: str, auth: str | None, raw: bytes) -> Answer:
        """(status, JSON body or loopback.NO_BODY, seconds to wait before answering, headers) for one request."""
        u = urlsplit(target)
        hit = find(verb, u.path)
        with self.lock:
            if hit is None or hit[0].key not in FAKED:
                what = f"{hit[0].key} on {hit[0].template} (not faked)" if hit else "no route of azure-mgmt-compute"
                self.violations.append(f"{what}: {verb} {u.path}")
                return 404, ArmError(404, "InvalidResourceType", f"{what}: {verb} {u.path}").body(), 0.0, {}
            route, params = hit
            query = parse_qsl(u.query, keep_blank_values=True)
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = raw.decode(errors="replace")
            self.calls[route.key] += 1
            self.requests.append((route.key, dict(query), body))
            if not re.fullmatch(r"Bearer \S+", auth or ""):
                how = "is missing" if not auth else "is provided in an invalid format"
                msg = f"Authentication failed. The 'Authorization' header {how}."
                return 401, ArmError(401, "AuthenticationFailed", msg).body(), 0.0, {}
            try:
                self._check_request(route, u.path, query, body)
            except ArmError as err:
                self.violations.append(f"{route.key}: {err.message}")
                return err.status, err.body(), 0.0, {}
            delay = self.delays.pop(route.key, 0.0)
            if self.throttles[route.key] > 0:
                self.throttles[route.key] -= 1
                msg = f"The request was throttled ({route.key}): too many requests. Retry after 1 second."
                return 429, ArmError(429, "TooManyRequests", msg).body(), delay, {"Retry-After": "1"}
            path = {k: unquote(v) for k, v in params.items()}
            try:
                status, out = self._dispatch(route, path, dict(query), body or {}, u.path)
            except ArmError as err:
                status, out = err.status, err.body()
            except Exception as err:  # the fake's own bug: a failed test, not a dropped connection
                self.violations.append(f"{route.key}: the fake failed: {err!r}")
                return 500, ArmError(500, "InternalServerError", repr(err)).body(), delay, {}
            probs = self._check_response(route, status, out)
            if probs:
                self.violations += probs
                return 500, ArmError(500, "InternalServerError", "; ".join(probs)).body(), delay, {}
            return status, out, delay, {}

    def _check_request(self, route: Route, path: str, query: list[tuple[str, str]], body: Any) -> None:
        names = [k for k, _ in query]
        q = dict(query)
        if "api-version" not in q:
            raise ArmError(
                400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required"
            )
        if q["api-version"] != route.api_version:
            msg = f"api-version {q['api-version']!r}: the fake serves only the SDK's default {route.api_version!r}"
            raise ArmError(400, "InvalidApiVersionParameter", msg, "api-version")
        for name in sorted({n for n in names if names.count(n) > 1}):
            raise ArmError(400, "InvalidParameter", f"query parameter {name!r} given more than once", name)
        for name, value in query:
            if name == "$skiptoken" and route.paged:
                if self.pages.get(value, ("",))[0] != path:
                    raise ArmError(400, "InvalidParameter", f"$skiptoken {value!r} is not one of this list's", name)
            elif name not in route.query:
                raise ArmError(400, "InvalidParameter", f"unknown query parameter {name!r}", name)
            elif (known := route.query[name]) is not None and value not in known:
                raise ArmError(400, "InvalidParameter", f"{name}={value!r} is not one of {sorted(known)}", name)
        if route.body is not None:
            probs = check(body, route.body, f"{route.key} body", response=False)
            if probs:
                raise ArmError(400, "InvalidRequestContent", "; ".join(probs))
        elif body is not None:
            raise ArmError(400, "InvalidRequestContent", f"{route.key} takes no request body, got {body!r}")

    def _check_response(self, route: Route, status: int, out: Any) -> list[str]:
        where = f"{route.key} response {status}"
        if out is loopback.NO_BODY:
            return [] if route.verb == "DELETE" else [f"{where}: no body"]
        if status >= 400:
            return check(out, models.CloudError, where, response=True) + sdk_reads(out, models.CloudError, where)
        if route.response is None:
            return [f"{where}: a body where the SDK reads none: {out!r}"]
        if route.paged:
            reads = [
                p for i, v in enumerate(out.get("value", [])) for p in sdk_reads(v, route.response, f"{where}[{i}]")
            ]
            return check_page(out, route.response, where) + reads
        return check(out, route.response, where, response=True) + sdk_reads(out, route.response, where)

    def _dispatch(self, route: Route, path: dict[str, str], q: dict[str, str], body: Res, url_path: str) -> Any:
        if route.key == "usage.list":
            sub, where = path["subscriptionId"].lower(), path["location"].lower()
            rows = {**self.usages.get(("*", where), {}), **self.usages.get((sub, where), {})}
            return self._page(list(rows.values()), q, url_path)
        sub, rg = path["subscriptionId"], path["resourceGroupName"]
        if self.resource_groups is not None and rg.lower() not in self.resource_groups:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        gname = path["capacityReservationGroupName"]
        gkey = (sub.lower(), rg.lower(), gname.lower())
        expand = q.get("$expand") == "instanceView"
        if route.key.startswith("capacityReservationGroups."):
            return getattr(self, "_group_" + route.key.split(".")[1])(gkey, (sub, rg, gname), body, expand)
        group = self.groups.get(gkey)
        if group is None and route.key != "capacityReservations.delete":
            msg = f"Can not perform requested operation on nested resource. Parent resource '{gname}' not found."
            raise ArmError(404, "ParentResourceNotFound", msg)
        if route.key == "capacityReservations.listByCapacityReservationGroup":
            return self._list(gkey, q, url_path)
        name = path["capacityReservationName"]
        rkey = (*gkey, name.lower())
        if route.key == "capacityReservations.get":
            if rkey not in self.reservations:
                raise not_found(f"{RESERVATION_TYPE}/{gname}/capacityReservations/{name}", rg)
            return 200, self._reservation_json(self.reservations[rkey], expand=expand)
        if route.key == "capacityReservations.delete":
            return self._delete_reservation(rkey)
        return self._put_reservation(group, rkey, name, body)

    # ---- groups -------------------------------------------------------------------------------------------------
    def _group_get(self, gkey: tuple[str, str, str], names: tuple[str, ...], body: Res, expand: bool) -> Any:
        if gkey not in self.groups:
            raise not_found(f"{GROUP_TYPE}/{names[2]}", names[1])
        return 200, self._group_json(self.groups[gkey], expand=expand)

    def _group_createOrUpdate(self, gkey: tuple[str, str, str], names: tuple[str, ...], body: Res, _: bool) -> Any:
        sub, rg, name = names
        location, zones, props = body.get("location"), list(body.get("zones") or []), body.get("properties") or {}
        if not location:
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        if bad := [z for z in zones if z not in ZONES]:
            raise ArmError(400, "InvalidParameter", f"Zones {bad} are not among the region's {sorted(ZONES)}", "zones")
        old = self.groups.get(gkey)
        if old is None:
            record = {"sub": sub, "rg": rg, "name": name, "location": location, "zones": zones}
            record |= {"tags": dict(body.get("tags") or {}), "reservationType": props.get("reservationType")}
            self.groups[gkey] = record | {"sharingProfile": props.get("sharingProfile")}
            return 201, self._group_json(self.groups[gkey], expand=False)
        changed = {
            "location": not same_location(location, old["location"]),
            "zones": sorted(zones) != sorted(old["zones"]),
            "properties.reservationType": props.get("reservationType", old["reservationType"])
            != old["reservationType"],
        }
        if field := next((f for f, c in changed.items() if c), None):
            msg = f"Changing property '{field}' is not allowed: only tags and sharingProfile of a group may change."
            raise ArmError(409, "PropertyChangeNotAllowed", msg, field)
        old["tags"], old["sharingProfile"] = dict(body.get("tags") or {}), props.get("sharingProfile")
        return 200, self._group_json(old, expand=False)

    def _group_delete(self, gkey: tuple[str, str, str], names: tuple[str, ...], body: Res, _: bool) -> Any:
        if gkey not in self.groups:
            return 204, loopback.NO_BODY
        held = [r["name"] for k, r in self.reservations.items() if k[:3] == gkey]
        if held:
            msg = (
                f"Capacity reservation group {names[2]} cannot be deleted: it still holds capacity reservations {held}."
            )
            raise ArmError(409, "OperationNotAllowed", msg)
        del self.groups[gkey]
        return 200, loopback.NO_BODY

    def _group_json(self, g: Res, *, expand: bool) -> Res:
        gid = f"/subscriptions/{g['sub']}/resourceGroups/{g['rg']}/providers/{GROUP_TYPE}/{g['name']}"
        held = [
            r for k, r in self.reservations.items() if k[:3] == (g["sub"].lower(), g["rg"].lower(), g["name"].lower())
        ]
        props: Res = {"capacityReservations": [{"id": f"{gid}/capacityReservations/{r['name']}"} for r in held]}
        props |= {k: copy.deepcopy(g[k]) for k in ("reservationType", "sharingProfile") if g[k] is not None}
        if expand:
            views = [{"name": r["name"]} | self._instance_view(r) for r in held]
            props["instanceView"] = {"capacityReservations": views}
        out: Res = {"id": gid, "name": g["name"], "type": GROUP_TYPE, "location": g["location"]}
        out |= {"tags": dict(g["tags"])} if g["tags"] else {}
        out |= {"zones": list(g["zones"])} if g["zones"] else {}
        return out | {"properties": props}

    # ---- reservations -------------------------------------------------------------------------------------------
    def _put_reservation(self, group: Res, rkey: Key, name: str, body: Res) -> Any:
        profile = (body.get("properties") or {}).get("scheduleProfile") or {}
        if "end" in profile:  # a Block reservation: not faked, so the client must not rely on it
            msg = "scheduleProfile.end (a Block capacity reservation): the fake does not implement Block reservations"
            self.violations.append(f"capacityReservations.createOrUpdate: {msg}")
            raise ArmError(400, "InvalidParameter", msg, "properties.scheduleProfile.end")
        old = self.reservations.get(rkey)
        want = desired(group, body, self.now, old)
        state = "Succeeded" if self.instant else None
        if old is None:
            self._allocate(want, want["sku"]["capacity"])
            record = {"sub": group["sub"], "rg": group["rg"], "group": group["name"], "name": name} | want
            record |= {"reservationId": str(uuid.uuid4()), "provisioningState": state or "Creating"}
            record |= {"timeCreated": self.now, "provisioningTime": self.now}
            self.reservations[rkey] = record | {"reservationState": "Pending" if want["schedule"] else None}
            return 201, self._reservation_json(self.reservations[rkey], expand=False)
        fixed = {
            "sku.name": want["sku"]["name"] != old["sku"]["name"],
            "zones": want["zones"] != old["zones"],
            "properties.scheduleProfile": (want["schedule"] is None) != (old["schedule"] is None),
        }
        if field := next((f for f, c in fixed.items() if c), None):
            msg = f"Changing property '{field}' of capacity reservation {old['name']} is not allowed."
            raise ArmError(409, "PropertyChangeNotAllowed", msg, field)
        provisioned = {k: want[k] for k in ("sku", "schedule")} != {k: old[k] for k in ("sku", "schedule")}
        if provisioned:
            if old["provisioningState"] not in TERMINAL:
                msg = f"Capacity reservation {old['name']} is {old['provisioningState']}: wait for it to finish."
                raise ArmError(409, "OperationNotAllowed", msg)
            if old["schedule"] is not None and (committed(old, self.now) or self.now > modifiable_until(old)):
                msg = (
                    f"Future capacity reservation {old['name']} can no longer be changed: modifiableUntil "
                    f"{stamp(modifiable_until(old))}, commitment until {stamp(commitment_end(old))}"
                )
                raise ArmError(409, "OperationNotAllowed", msg)
            self._allocate(want, want["sku"]["capacity"] - old["sku"]["capacity"])
            old |= {"provisioningState": state or "Updating", "provisioningTime": self.now}
        old |= want
        return 200, self._reservation_json(old, expand=False)

    def _allocate(self, want: Res, more: int) -> None:
        """ARM's answer when there is no capacity for ``more`` VMs of the SKU (a Future reservation is not allocated
        at its PUT)."""
        sku = want["sku"]["name"]
        if more <= 0 or want["schedule"] is not None or sku.lower() not in self.refused:
            return
        where = "zone" if want["zones"] else "region"
        code = self.refused[sku.lower()] or ("ZonalAllocationFailed" if want["zones"] else "AllocationFailed")
        msg = (
            f"Allocation failed. We do not have sufficient capacity for the requested VM size {sku} in this {where}. "
            "Read more about improving likelihood of allocation success at http://aka.ms/allocation-guidance"
        )
        raise ArmError(409, code, msg)

    def _delete_reservation(self, rkey: tuple[str, str, str, str]) -> Any:
        r = self.reservations.get(rkey)
        if r is None:
            return 204, loopback.NO_BODY
        if committed(r, self.now):
            msg = (
                f"Future capacity reservation {r['name']} is {r['reservationState']}: it cannot be deleted before "
                f"{stamp(commitment_end(r))} (minimumCommitmentDays after its start)."
            )
            raise ArmError(409, "OperationNotAllowed", msg)
        del self.reservations[rkey]
        return 200, loopback.NO_BODY

    def _list(self, gkey: tuple[str, str, str], q: dict[str, str], url_path: str) -> Any:
        held = [self._reservation_json(r, expand=False) for k, r in self.reservations.items() if k[:3] == gkey]
        return self._page(held, q, url_path)

    def _page(self, rows: list[Res], q: dict[str, str], url_path: str) -> Any:
        """One page of a list, with a ``nextLink`` carrying a ``$skiptoken`` of the fake's while more remain."""
        start = self.pages.pop(q["$skiptoken"])[1] if "$skiptoken" in q else 0
        out: Res = {"value": copy.deepcopy(rows[start : start + self.page_size])}
        if start + self.page_size < len(rows):
            token = secrets.token_urlsafe(12)
            self.pages[token] = (url_path, start + self.page_size)
            nxt = {k: v for k, v in q.items() if k != "$skiptoken"} | {"$skiptoken": token}
            out["nextLink"] = f"{self.url}{url_path}?{urlencode(nxt)}"
        return 200, out

    def _instance_view(self, r: Res) -> Res:
        state = r["provisioningState"]
        live = r["reservationState"] == "Live" if r["schedule"] is not None else state == "Succeeded"
        status = {"code": f"ProvisioningState/{state.lower()}", "level": "Error" if state == "Failed" else "Info"}
        status |= {"displayStatus": f"Provisioning {state.lower()}", "time": stamp(r["provisioningTime"])}
        view: Res = {"utilizationInfo": {"currentCapacity": r["sku"]["capacity"] if live else 0}, "statuses": [status]}
        if r["schedule"] is not None:
            view["reservationStateInfo"] = {"reservationState": r["reservationState"]}
        return view

    def _reservation_json(self, r: Res, *, expand: bool) -> Res:
        gid = f"/subscriptions/{r['sub']}/resourceGroups/{r['rg']}/providers/{GROUP_TYPE}/{r['group']}"
        props: Res = {"reservationId": r["reservationId"], "provisioningState": r["provisioningState"]}
        props |= {"provisioningTime": stamp(r["provisioningTime"]), "timeCreated": stamp(r["timeCreated"])}
        if r["schedule"] is not None:
            until = stamp(modifiable_until(r))
            props["scheduleProfile"] = dict(r["schedule"]) | {"modifiableUntil": until}
        if expand:
            props["instanceView"] = self._instance_view(r)
        out: Res = {"id": f"{gid}/capacityReservations/{r['name']}", "name": r["name"], "type": RESERVATION_TYPE}
        out |= {"location": r["location"], "sku": dict(r["sku"])}
        out |= {"tags": dict(r["tags"])} if r["tags"] else {}
        out |= {"zones": list(r["zones"])} if r["zones"] else {}
        return out | {"properties": props}


def _faked(method_key: str) -> str:
    if method_key not in FAKED:
        raise ValueError(f"{method_key!r} is not one of the faked method keys {sorted(FAKED)}")
    return method_key
