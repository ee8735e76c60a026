"""A stateful fake of the Compute Engine reservation calls, on loopback HTTP, checked against Google's own discovery
document (compute.v1.json, shipped in google-api-python-client).

Served under ``/compute/v1/``: reservations insert/get/list/delete/resize, futureReservations insert/get/cancel/delete,
zoneOperations get/wait/list (list's ``filter``: only ``field = "value"`` terms, ANDed). A route is found by (HTTP method, path template) in the discovery document; every request
(query parameters, body) and every response is checked against the method's parameters and schemas. A broken request
is kept in ``violations`` and answered 400 (a broken response: 500, the fake's own bug); GCP's own refusals (a bad
resource name, an existing name, a missing resource) are answered in GCP's error format without a violation. A retry
with the same ``requestId`` gets the operation of the first call back and changes nothing (as GCP documents).
Faults for tests: ``refuse_capacity(zone)`` (the insert's operation ends DONE with ZONE_RESOURCE_POOL_EXHAUSTED),
``delay_next(method_key, s)`` (performed, answered only after ``s`` seconds), ``throttle_next(method_key)`` (429),
``hold_operations(True)`` (operations stay RUNNING until ``finish_operations()``), ``forget_request_ids()`` (the
retention of request ids has passed), ``only_projects(...)`` (a call under another project answers 404 notFound naming
the project, as Compute Engine answers for a project that does not exist). The fake has no clock of its own:
lifecycles move when a test says so (``set_status``, ``set_procurement_status``: a future reservation FULFILLED
gets its auto-created reservation, as GCP delivers one; ``delete``).
"""

from __future__ import annotations

import itertools
import json
import re
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import googleapiclient

from tests import loopback

DISCOVERY: dict[str, Any] = json.loads(
    (Path(googleapiclient.__file__).parent / "discovery_cache/documents/compute.v1.json").read_text()
)
SCHEMAS: dict[str, Any] = DISCOVERY["schemas"]
BASE = DISCOVERY["basePath"]  # /compute/v1/
LINK = "https://www.googleapis.com/compute/v1/"
FAKED = frozenset(
    [f"reservations.{m}" for m in ("insert", "get", "list", "delete", "resize")]
    + [f"futureReservations.{m}" for m in ("insert", "get", "cancel", "delete")]
    + ["zoneOperations.get", "zoneOperations.wait", "zoneOperations.list"]
)
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
OUTPUT_ONLY = re.compile(r"\s*(output only\b|\[output only\])", re.I)  # "Output only. [Output Only] ..." too
INPUT_ONLY = re.compile(r"\s*input only\b", re.I)
PACIFIC = timezone(timedelta(hours=-8))  # GCP stamps resources in Pacific time, with an offset, not Z
CANCELLABLE = {"DRAFTING", "PENDING_APPROVAL", "APPROVED", "PROCURING", "PENDING_AMENDMENT_APPROVAL", "COMMITTED"}
ERRORS = {400: ("invalid", "INVALID_ARGUMENT"), 401: ("required", "UNAUTHENTICATED"), 404: ("notFound", "NOT_FOUND")}
ERRORS |= {409: ("alreadyExists", "ALREADY_EXISTS"), 429: ("rateLimitExceeded", "RESOURCE_EXHAUSTED")}
ERRORS |= {500: ("backendError", "INTERNAL")}
Res = dict[str, Any]
Table = dict[tuple[str, str, str], Res]


def _routes() -> list[tuple[str, re.Pattern[str], str, Res]]:
    out = []
    for rname, res in DISCOVERY["resources"].items():
        for mname, m in res.get("methods", {}).items():
            rx = re.sub(r"\\\{\\?\+?(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(m["path"]))
            out.append((m["httpMethod"], re.compile(rx), f"{rname}.{mname}", m))
    # a faked method first, then the template with the most literal text
    out.sort(key=lambda r: (r[2] not in FAKED, -len(re.sub(r"\{[^}]*\}", "", r[3]["path"]))))
    return out


ROUTES = _routes()


# ---- the validator ------------------------------------------------------------------------------------------------
def validate(value: Any, schema: Res | str, where: str, *, response: bool, schemas: Res | None = None) -> list[str]:
    """Problems of ``value`` against a discovery schema (or a schema name). A request may not carry output-only
    fields; a response may not carry input-only fields or nulls. Both: no unknown fields, JSON types as the discovery
    document says (int64/uint64 as strings of digits, int32 as numbers), enum members, RFC 3339 times. ``schemas``:
    another discovery document's (default Compute Engine's)."""
    schemas = SCHEMAS if schemas is None else schemas
    schema = {"$ref": schema} if isinstance(schema, str) else schema
    while "$ref" in schema:
        schema = {**schemas[schema["$ref"]], **{k: v for k, v in schema.items() if k != "$ref"}}
    if value is None:
        return [f"{where}: null in a response"] if response else []
    typ, fmt, probs = schema.get("type"), schema.get("format"), []
    got = f"got {type(value).__name__} {value!r}"
    if typ == "object":
        if not isinstance(value, dict):
            return [f"{where}: expected an object, {got}"]
        props, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for k, v in value.items():
            sub = props.get(k) or extra
            if sub is None:
                if props:  # an object with neither properties nor additionalProperties is free-form
                    probs.append(f"{where}.{k}: unknown field")
                continue
            desc = sub.get("description", "") if k in props else ""
            if not response and OUTPUT_ONLY.match(desc):
                probs.append(f"{where}.{k}: output-only field sent by the client")
            if response and INPUT_ONLY.match(desc):
                probs.append(f"{where}.{k}: input-only field in a response")
            probs += validate(v, sub, f"{where}.{k}", response=response, schemas=schemas)
        return probs
    if typ == "array":
        if not isinstance(value, list):
            return [f"{where}: expected an array, {got}"]
        items = schema.get("items", {})
        return [
            p
            for i, v in enumerate(value)
            for p in validate(v, items, f"{where}[{i}]", response=response, schemas=schemas)
        ]
    if typ == "string":
        if not isinstance(value, str):
            return [f"{where}: expected a JSON string{f' ({fmt})' if fmt else ''}, {got}"]
        if fmt in ("int64", "uint64") and not re.fullmatch(r"-?\d+" if fmt == "int64" else r"\d+", value):
            probs.append(f"{where}: {value!r} is not a {fmt} string of digits")
        if (fmt == "google-datetime" or re.search(r"(Time|Timestamp)$", where)) and not _rfc3339(value):
            probs.append(f"{where}: {value!r} is not an RFC 3339 timestamp")
    elif typ == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            return [f"{where}: expected a JSON number ({fmt}), {got}"]
        lo, hi = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1)}.get(fmt or "", (-(2**63), 2**64))
        if not lo <= value <= hi:
            probs.append(f"{where}: {value} out of {fmt} range")
    elif typ == "number" and (not isinstance(value, int | float) or isinstance(value, bool)):
        return [f"{where}: expected a JSON number, {got}"]
    elif typ == "boolean" and not isinstance(value, bool):
        return [f"{where}: expected a boolean, {got}"]
    if "enum" in schema and value not in schema["enum"]:
        probs.append(f"{where}: {value!r} is not one of {schema['enum']}")
    return probs


def validate_query(method: Res, key: str, query: list[tuple[str, str]], *, discovery: Res | None = None) -> list[str]:
    """Problems of the query string: each parameter the method's (location query) or a global one, typed as the
    discovery document says, required ones present; ``requestId`` a non-zero UUID. ``discovery``: another API's
    document (default Compute Engine's), for its global parameters."""
    params, probs = {**(discovery or DISCOVERY)["parameters"], **method.get("parameters", {})}, []
    for name, n in Counter(k for k, _ in query).items():
        if n > 1 and not params.get(name, {}).get("repeated"):
            probs.append(f"{key}: query parameter {name} given {n} times")
    for name, value in query:
        p, bad = params.get(name), f"{key}: query parameter {name}={value!r}"
        if p is None or p.get("location") != "query":
            probs.append(f"{key}: unknown query parameter {name}={value!r}")
        elif p.get("type") == "integer" and not re.fullmatch(r"-?\d+", value):
            probs.append(f"{bad} is not an integer")
        elif p.get("type") == "integer" and not int(p.get("minimum", -(2**63))) <= int(value) <= int(
            p.get("maximum", 2**64)
        ):
            probs.append(f"{bad} is out of range")
        elif p.get("type") == "boolean" and value not in ("true", "false"):
            probs.append(f"{bad} is not true/false")
        elif "enum" in p and value not in p["enum"]:
            probs.append(f"{bad} is not one of {p['enum']}")
        elif name == "requestId" and (not UUID_RE.fullmatch(value) or not value.strip("0-")):
            probs.append(f"{bad} is not a valid non-zero UUID")
    given = {k for k, _ in query}
    for name, p in method.get("parameters", {}).items():
        if p.get("location") == "query" and p.get("required") and name not in given:
            probs.append(f"{key}: required query parameter {name} missing")
    return probs


def _rfc3339(s: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", s):
        return False
    try:
        _at(s)
    except ValueError:
        return False
    return True


def _at(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def _now() -> str:
    return datetime.now(PACIFIC).isoformat(timespec="milliseconds")


class GcpError(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.reason = code, message, reason or ERRORS[code][0]

    def body(self) -> Res:
        err = {"domain": "global", "reason": self.reason, "message": self.message}
        return {"error": {"code": self.code, "message": self.message, "errors": [err], "status": ERRORS[self.code][1]}}


# ---- the fake -----------------------------------------------------------------------------------------------------
class FakeGcp:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str], Any]] = []  # (method key, query, JSON body or None)
        self.violations: list[str] = []
        self.reservations: Table = {}  # keyed by (project, zone, name), as are the next two
        self.future_reservations: Table = {}
        self.operations: Table = {}
        self.request_ids: dict[tuple[str, str, str, str], tuple[str, str, str]] = {}
        self.pending: dict[tuple[str, str, str], Callable[[], object]] = {}  # what finishing a held operation does
        self.no_capacity: set[str] = set()
        self.delays: dict[str, float] = {}
        self.throttles: Counter[str] = Counter()
        self.hold = False
        self.projects: set[str] | None = None  # None: any project exists
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ---- test controls --------------------------------------------------------------------------------------------
    def refuse_capacity(self, zone: str) -> None:
        self.no_capacity.add(zone)

    def delay_next(self, method_key: str, seconds: float) -> None:
        self.delays[method_key] = seconds

    def throttle_next(self, method_key: str, times: int = 1) -> None:
        self.throttles[method_key] += times

    def only_projects(self, *projects: str) -> None:
        """Only these projects exist (until ``reset``): a call under another is 404 notFound naming the project."""
        self.projects = set(projects)

    def hold_operations(self, hold: bool = True) -> None:
        self.hold = hold

    def finish_operations(self) -> None:
        with self.lock:
            for key, op in self.operations.items():
                if op["status"] != "DONE":
                    self.pending.pop(key, lambda: None)()
                    op.update(status="DONE", progress=100, endTime=_now())

    def forget_request_ids(self) -> None:
        """GCP keeps a requestId for a while (at least an hour); after that a retry with it is a new request."""
        with self.lock:
            self.request_ids.clear()

    def _key(self, table: Table, zone: str, name: str, project: str | None) -> tuple[str, str, str]:
        hits = [k for k in table if k[1:] == (zone, name) and project in (None, k[0])]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} resources named {name} in {zone}")
        return hits[0]

    def reservation(self, zone: str, name: str, project: str | None = None) -> Res:
        return self.reservations[self._key(self.reservations, zone, name, project)]

    def future_reservation(self, zone: str, name: str, project: str | None = None) -> Res:
        return self.future_reservations[self._key(self.future_reservations, zone, name, project)]

    def set_status(self, zone: str, name: str, status: str, project: str | None = None) -> None:
        with self.lock:
            self.reservation(zone, name, project)["status"] = status

    def set_procurement_status(
        self, zone: str, name: str, status: str, project: str | None = None, *, fulfilled: int | None = None
    ) -> None:
        """Move a future reservation's procurement status. FULFILLED / FAILED_PARTIALLY_FULFILLED deliver it as GCP
        does at its start: one reservation auto-created (``<namePrefix or name>-<start date>-0001``) holding the
        machines delivered (``fulfilled``, default the whole ``totalCount``), READY, deleted by GCP at
        ``autoCreatedReservationsDeleteTime`` (or the window's end) when ``autoDeleteAutoCreatedReservations``; its
        URL listed in ``status.autoCreatedReservations``, the count in ``status.fulfilledCount``. Delivered once."""
        with self.lock:
            key = self._key(self.future_reservations, zone, name, project)
            fr = self.future_reservations[key]
            fr["status"]["procurementStatus"] = status
            if status in ("FULFILLED", "FAILED_PARTIALLY_FULFILLED") and not fr["status"].get(
                "autoCreatedReservations"
            ):
                self._deliver(key, fr, fulfilled)

    def _deliver(self, key: tuple[str, str, str], fr: Res, fulfilled: int | None) -> None:
        project, zone, name = key
        sku = fr["specificSkuProperties"]
        count = str(int(sku["totalCount"]) if fulfilled is None else fulfilled)
        start = _at(fr["timeWindow"]["startTime"]).strftime("%Y%m%d")
        auto = f"{fr.get('namePrefix') or name[:40].rstrip('-')}-{start}-0001"
        zone_link = f"{LINK}projects/{project}/zones/{zone}"
        res: Res = {"kind": "compute#reservation", "id": str(10**15 + next(self._ids) * 7919), "name": auto}
        res |= {"creationTimestamp": _now(), "selfLink": f"{zone_link}/reservations/{auto}", "zone": zone_link}
        res |= {"status": "READY", "specificReservationRequired": bool(fr.get("specificReservationRequired"))}
        res["specificReservation"] = {
            "count": count,
            "inUseCount": "0",
            "instanceProperties": sku["instanceProperties"],
        }
        if fr.get("autoDeleteAutoCreatedReservations"):
            res["deleteAtTime"] = fr.get("autoCreatedReservationsDeleteTime") or fr["timeWindow"]["endTime"]
        self.reservations[(project, zone, auto)] = res
        fr["status"] |= {"autoCreatedReservations": [res["selfLink"]], "fulfilledCount": count}

    def delete(self, zone: str, name: str, project: str | None = None) -> None:
        """The reservation disappears (as GCP deletes it at its deleteAtTime)."""
        with self.lock:
            del self.reservations[self._key(self.reservations, zone, name, project)]

    def reset(self) -> None:
        with self.lock:
            for c in (self.calls, self.requests, self.violations, self.reservations, self.future_reservations):
                c.clear()
            for d in (self.operations, self.request_ids, self.pending, self.no_capacity, self.delays, self.throttles):
                d.clear()
            self.hold = False
            self.projects = None

    # ---- server ---------------------------------------------------------------------------------------------------
    def start(self) -> FakeGcp:
        self._server, self.url = loopback.serve_json(self.handle)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    # ---- dispatch -------------------------------------------------------------------------------------------------
    def handle(self, verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Res, float]:
        """(status, JSON body, seconds to wait before answering) for one HTTP request."""
        u = urlsplit(target)
        rel = u.path[len(BASE) :] if u.path.startswith(BASE) else ""
        hit = next(((k, m, mt) for v, rx, k, m in ROUTES if v == verb and (mt := rx.fullmatch(rel))), None)
        with self.lock:
            if hit is None or hit[0] not in FAKED:
                what = f"{hit[0]} (not faked)" if hit else "unknown method"
                self.violations.append(f"{what}: {verb} {u.path}")
                return 404, GcpError(404, f"{what}: {verb} {u.path}").body(), 0.0
            key, method, match = hit
            query = parse_qsl(u.query, keep_blank_values=True)
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = raw.decode(errors="replace")
            self.calls[key] += 1
            self.requests.append((key, dict(query), body))
            if not re.fullmatch(r"Bearer \S+", auth or ""):
                msg = "Request is missing required authentication credential. Expected OAuth 2 access token."
                return 401, GcpError(401, msg).body(), 0.0
            probs = validate_query(method, key, query)
            if "request" in method:
                probs += validate({} if body is None else body, method["request"]["$ref"], key, response=False)
            elif body not in (None, {}):
                probs.append(f"{key}: takes no request body, got {body!r}")
            if probs:
                self.violations += probs
                return 400, GcpError(400, "; ".join(probs)).body(), 0.0
            delay = self.delays.pop(key, 0.0)
            if self.throttles[key] > 0:
                self.throttles[key] -= 1
                return 429, GcpError(429, "Rate Limit Exceeded").body(), delay
            p, q = {k: unquote(v) for k, v in match.groupdict().items()}, dict(query)
            rid = (p.get("project", ""), p.get("zone", ""), key, q.get("requestId", ""))
            try:
                for name, spec in method["parameters"].items():
                    if spec.get("location") == "path" and not re.fullmatch(spec.get("pattern", ".*"), p[name]):
                        msg = f"Invalid value for field '{name}': '{p[name]}'. Must be a match of regex '{spec['pattern']}'"
                        raise GcpError(400, msg)
                if self.projects is not None and p.get("project") not in self.projects:
                    raise GcpError(404, f"The resource 'projects/{p.get('project')}' was not found")
                if rid in self.request_ids:  # a retry: the first call's operation, as it is now; nothing changes
                    out = self.operations[self.request_ids[rid]]
                else:
                    out = getattr(self, "_" + re.sub(r"(?<=[a-z])(?=[A-Z])|\.", "_", key).lower())(p, q, body or {})
            except GcpError as err:
                return err.code, err.body(), delay
            if out.get("kind") == "compute#operation" and "requestId" in q:
                self.request_ids[rid] = (p["project"], p["zone"], out["name"])
            probs = validate(out, method["response"]["$ref"], f"{key} response", response=True)
            if probs:
                self.violations += probs
                return 500, GcpError(500, "; ".join(probs)).body(), delay
            return 200, json.loads(json.dumps(out)), delay  # a copy: answered outside the lock

    # ---- operations -----------------------------------------------------------------------------------------------
    def _operation(
        self,
        p: dict[str, str],
        q: dict[str, str],
        op_type: str,
        target: Res,
        effect: Callable[[], object] | None = None,
    ) -> Res:
        """A new operation on ``target``; DONE at once (``effect`` done) unless operations are held."""
        project, zone = p["project"], p["zone"]
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(7)[:13]}-{secrets.token_hex(4)}"
        zone_link = f"{LINK}projects/{project}/zones/{zone}"
        op: Res = {"kind": "compute#operation", "id": str(10**18 + next(self._ids) * 7919), "name": name}
        op |= {"zone": zone_link, "operationType": op_type, "targetLink": target["selfLink"], "progress": 0}
        op |= {"targetId": target.get("id", "0"), "status": "RUNNING", "insertTime": _now(), "startTime": _now()}
        op |= {
            "user": "gpufleet-test@fake-project.iam.gserviceaccount.com",
            "selfLink": f"{zone_link}/operations/{name}",
        }
        if "requestId" in q:
            op["clientOperationId"] = q["requestId"]
        key = (project, zone, name)
        self.operations[key] = op
        if self.hold:
            self.pending[key] = effect or (lambda: None)
        else:
            if effect:
                effect()
            op.update(status="DONE", progress=100, endTime=_now())
        return op

    def _zone_operations_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        return self._get(self.operations, p, "operations", p["operation"])

    _zone_operations_wait = _zone_operations_get  # GCP's wait may return before DONE; this one returns at once

    def _zone_operations_list(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        """The zone's operations matching ``filter``'s ``field = "value"`` terms (all of them), oldest first; a
        filter of another form is refused (the fake does not read it)."""
        text = q.get("filter", "")
        terms = re.findall(r'\(?\s*(\w+)\s*=\s*"([^"]*)"\s*\)?', text)
        if re.sub(r'\(?\s*\w+\s*=\s*"[^"]*"\s*\)?', "", text).strip():
            raise GcpError(400, f"Invalid value for field 'filter': '{text}'")
        items = [op for k, op in self.operations.items() if k[:2] == (p["project"], p["zone"])
                 and all(str(op.get(f)) == v for f, v in terms)]  # fmt: skip
        coll = f"projects/{p['project']}/zones/{p['zone']}/operations"
        out: Res = {"kind": "compute#operationList", "id": coll, "selfLink": LINK + coll}
        if items:
            out["items"] = items
        return out

    # ---- reservations and future reservations ---------------------------------------------------------------------
    def _get(self, table: Table, p: dict[str, str], coll: str, name: str) -> Res:
        r = table.get((p["project"], p["zone"], name))
        if r is None:
            raise GcpError(404, f"The resource 'projects/{p['project']}/zones/{p['zone']}/{coll}/{name}' was not found")
        return r

    def _insert(self, coll: str, table: Table, p: dict[str, str], q: dict[str, str], body: Res, res: Res) -> Res:
        name, zone_link = body.get("name"), f"{LINK}projects/{p['project']}/zones/{p['zone']}"
        if not name:
            raise GcpError(400, "Required field 'resource.name' not specified", "required")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            rx = "(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)"
            raise GcpError(400, f"Invalid value for field 'resource.name': '{name}'. Must be a match of regex '{rx}'")
        if (p["project"], p["zone"], name) in table:
            raise GcpError(
                409, f"The resource 'projects/{p['project']}/zones/{p['zone']}/{coll}/{name}' already exists"
            )
        link = f"{zone_link}/{coll}/{name}"
        if p["zone"] in self.no_capacity:
            op = self._operation(p, q, "insert", {"selfLink": link})
            msg = f"The zone 'projects/{p['project']}/zones/{p['zone']}' does not have enough resources available to fulfill the request.  Try a different zone, or try again later."
            op |= {"error": {"errors": [{"code": "ZONE_RESOURCE_POOL_EXHAUSTED", "message": msg}]}}
            op |= {"httpErrorStatusCode": 503, "httpErrorMessage": "SERVICE UNAVAILABLE", "status": "DONE"}
            op |= {"progress": 100, "endTime": _now()}
            self.pending.pop((p["project"], p["zone"], op["name"]), None)
            return op
        res = {k: v for k, v in body.items() if k != "params"} | res  # params is input only
        res |= {"id": str(10**15 + next(self._ids) * 7919), "creationTimestamp": _now(), "selfLink": link}
        res |= {"zone": zone_link}
        if coll == "futureReservations":
            res["selfLinkWithId"] = f"{zone_link}/{coll}/{res['id']}"
        table[(p["project"], p["zone"], name)] = res
        return self._operation(p, q, "insert", res)

    def _reservations_insert(self, p: dict[str, str], q: dict[str, str], body: Res) -> Res:
        spec = body.get("specificReservation")
        if not spec or "count" not in spec:
            raise GcpError(400, "Required field 'resource.specificReservation.count' not specified", "required")
        res = {"kind": "compute#reservation", "status": "CREATING", "specificReservation": spec | {"inUseCount": "0"}}
        return self._insert("reservations", self.reservations, p, q, body, res)

    def _reservations_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        return self._get(self.reservations, p, "reservations", p["reservation"])

    def _reservations_list(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        """``filter`` and ``orderBy`` are accepted and ignored: every reservation of the zone, by name."""
        items = [r for k, r in sorted(self.reservations.items()) if k[:2] == (p["project"], p["zone"])]
        start, size, token = 0, int(q.get("maxResults", 500)) or 500, q.get("pageToken")
        if size > 500:
            raise GcpError(400, f"Invalid value for field 'maxResults': '{size}'. Must be less than or equal to 500")
        if token is not None:
            if not re.fullmatch(r"page-\d+", token):
                raise GcpError(400, f"Invalid value for field 'pageToken': '{token}'")
            start = int(token[5:])
        coll = f"projects/{p['project']}/zones/{p['zone']}/reservations"
        out: Res = {"kind": "compute#reservationList", "id": coll, "selfLink": LINK + coll}
        if items[start : start + size]:
            out["items"] = items[start : start + size]  # GCP leaves an empty list out
        if start + size < len(items):
            out["nextPageToken"] = f"page-{start + size}"
        return out

    def _reservations_delete(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        res = self._get(self.reservations, p, "reservations", p["reservation"])
        res["status"] = "DELETING"
        key = (p["project"], p["zone"], p["reservation"])
        return self._operation(p, q, "delete", res, lambda: self.reservations.pop(key, None))

    def _reservations_resize(self, p: dict[str, str], q: dict[str, str], body: Res) -> Res:
        res = self._get(self.reservations, p, "reservations", p["reservation"])
        if "specificSkuCount" not in body:
            raise GcpError(400, "Required field 'specificSkuCount' not specified", "required")
        if res["status"] == "DELETING":
            raise GcpError(400, f"The reservation '{p['reservation']}' is being deleted", "resourceNotReady")
        before, res["status"] = res["status"], "UPDATING"

        def effect() -> None:
            res["specificReservation"]["count"] = body["specificSkuCount"]
            res["status"] = before

        return self._operation(p, q, "resize", res, effect)

    def _future_reservations_insert(self, p: dict[str, str], q: dict[str, str], body: Res) -> Res:
        for field in ("timeWindow", "specificSkuProperties"):
            if field not in body:
                raise GcpError(400, f"Required field 'resource.{field}' not specified", "required")
        tw = body["timeWindow"]
        if "startTime" in tw and "endTime" in tw and _at(tw["endTime"]) <= _at(tw["startTime"]):
            raise GcpError(400, "Invalid value for field 'resource.timeWindow': endTime must be after startTime")
        status = "DRAFTING" if body.get("planningStatus") == "DRAFT" else "PENDING_APPROVAL"
        res = {"kind": "compute#futureReservation", "status": {"procurementStatus": status}}
        return self._insert("futureReservations", self.future_reservations, p, q, body, res)

    def _future_reservations_get(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        return self._get(self.future_reservations, p, "futureReservations", p["futureReservation"])

    def _future_reservations_cancel(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        fr = self._get(self.future_reservations, p, "futureReservations", p["futureReservation"])
        state = fr["status"]["procurementStatus"]
        if state not in CANCELLABLE:
            raise GcpError(400, f"Future reservation '{p['futureReservation']}' cannot be cancelled in state {state}")
        return self._operation(p, q, "cancel", fr, lambda: fr["status"].update(procurementStatus="CANCELLED"))

    def _future_reservations_delete(self, p: dict[str, str], q: dict[str, str], body: Any) -> Res:
        fr = self._get(self.future_reservations, p, "futureReservations", p["futureReservation"])
        key = (p["project"], p["zone"], p["futureReservation"])
        return self._operation(p, q, "delete", fr, lambda: self.future_reservations.pop(key, None))
