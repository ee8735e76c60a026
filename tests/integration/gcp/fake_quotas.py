"""A stateful fake of Google's Cloud Quotas API (v1), on loopback HTTP, checked against Google's own client library
(google-cloud-quotas: its REST routes and proto-plus types, read by quotas_api.py).

Served under ``/v1/`` for projects (location ``global``): quotaInfos get/list, quotaPreferences create/get/patch/
list. A route is found by (HTTP method, URI template) in the library's ``http_options``; the folder and organization
routes exist there but are not faked. Every request (query parameters, body) and every response is checked against
the request and response messages (quotas_api.check, check_query). A broken request is kept in ``violations`` and
answered 400 INVALID_ARGUMENT (a broken response: 500 INTERNAL, the fake's own bug); Google's own refusals (a
missing required field, no contact email on an increase, an existing preference, a stale etag, an unknown resource)
are answered in Google's error format (``{"error": {"code", "message", "status"}}``) without a violation. A list
request with ``filter`` is a violation: the fake does not implement filters, so the client must not rely on one.

Behaviour, as the types' docstrings say: one preference per (service, quotaId, dimensions); a preferred value above
the quota's current value for those dimensions is an increase (needs ``contactEmail``; ``reconciling`` until a test
calls ``decide``; gets a ``traceId``), a lower or equal one is applied at once (``grantedValue``, and the QuotaInfo's
value for those dimensions). PATCH honours ``etag`` (ABORTED), ``updateMask`` (none: every field), ``allowMissing``
and ``validateOnly``. Test controls: ``set_quota``, ``set_project_number``, ``decide``, ``throttle_next``,
``delay_next``; ``preference``, ``quota_value``, ``calls`` and ``requests`` to look at. The fake has no clock of its
own: a preference stays reconciling until ``decide``.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from google.cloud.cloudquotas_v1.types import cloudquotas, resources

from tests import loopback
from tests.integration.gcp.quotas_api import ROUTES, Route, check, check_query, snake, to_json

STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}
STATUS |= {500: "INTERNAL"}
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.~-]{0,62}")  # assumed: Google does not document the id's alphabet
PAGE_SIZE, MAX_PAGE_SIZE = 100, 1000  # assumed: Google documents only "server may return fewer items"
SETTABLE = ("quota_config.preferred_value", "quota_config.annotations", "justification", "contact_email")
IMMUTABLE = ("service", "quota_id", "dimensions")
ORDER_BY = {"name", "service", "quota_id", "create_time", "update_time"}
Res = dict[str, Any]
Pref = Any  # a QuotaPreference protobuf message (QuotaPreference.pb())
Dims = dict[str, str]


class QuotasError(Exception):
    def __init__(self, code: int, message: str, status: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status or STATUS[code]

    def body(self) -> Res:
        return {"error": {"code": self.code, "message": self.message, "status": self.status}}


def _rows(info: Res) -> list[Res]:
    """Its DimensionsInfo rows, the more specific first (as Google orders them)."""
    return sorted(info["dimensions_infos"], key=lambda r: -len(r["dimensions"]))


def _value(info: Res, dims: Dims) -> int:
    """The value in effect for ``dims``: the row with exactly those dimensions, else the most specific row whose
    dimensions are a subset of them (a row without a dimension applies to all its values); 0 if none."""
    for row in _rows(info):
        if row["dimensions"].items() <= dims.items():
            return int(row["value"])
    return 0


def _increase(preferred: int, current: int) -> bool:
    return current != -1 and (preferred == -1 or preferred > current)  # -1 is "unlimited"


class FakeQuotas:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str], Any]] = []  # (method key, query, JSON body or None)
        self.violations: list[str] = []
        self.infos: dict[tuple[str, str, str], Res] = {}  # (project or "*", service, quota id) -> a seeded QuotaInfo
        self.prefs: dict[str, dict[str, Pref]] = {}  # project -> preference id -> QuotaPreference, in creation order
        self.numbers: dict[str, str] = {}  # project id -> project number
        self.delays: dict[str, float] = {}
        self.throttles: Counter[str] = Counter()
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ---- test controls ------------------------------------------------------------------------------------------
    def set_quota(
        self,
        service: str,
        quota_id: str,
        dimensions_infos: list[Res],
        *,
        metric_unit: str = "1",
        dimensions: list[str] | None = None,
        container_type: str = "PROJECT",
        project: str = "*",
        metric: str | None = None,
        is_fixed: bool = False,
        eligible: bool = True,
    ) -> None:
        """Seed a QuotaInfo: rows ``{"dimensions": {...}, "value": 8, "applicable_locations": [...]}``; for every
        project unless ``project`` is given (a project's copy is made when it first reads or changes it)."""
        rows = [
            {
                "dimensions": dict(r.get("dimensions", {})),
                "value": int(r["value"]),
                "applicable_locations": list(r.get("applicable_locations", ["global"])),
            }
            for r in dimensions_infos
        ]
        info: Res = {"service": service, "quota_id": quota_id, "metric_unit": metric_unit, "dimensions_infos": rows}
        info |= {"dimensions": list(dimensions if dimensions is not None else ["region", "gpu_family"])}
        info |= {"metric": metric or f"{service}/{quota_id.lower()}", "is_fixed": is_fixed, "eligible": eligible}
        with self.lock:
            self.infos[(self._project(project), service, quota_id)] = info | {"container_type": container_type}

    def set_project_number(self, project_id: str, number: str) -> None:
        """The project may then be named by id or number: one table, and Google's names carry the number."""
        self.numbers[project_id] = number

    def decide(
        self, preference_id: str, granted: int, *, project: str | None = None, state_detail: str | None = None
    ) -> None:
        """Google's decision on a reconciling preference: ``granted`` becomes its grantedValue and the QuotaInfo's
        value for exactly its dimensions (a row replaced or added, applicable to its region)."""
        with self.lock:
            proj, pref = self._find(preference_id, project)
            if not pref.reconciling:
                raise ValueError(f"preference {preference_id} is not reconciling")
            detail = state_detail or (
                "approved" if granted >= pref.quota_config.preferred_value else "partially approved"
            )
            pref.quota_config.state_detail = detail
            self._grant(proj, pref, granted)

    def delay_next(self, method_key: str, seconds: float) -> None:
        self.delays[method_key] = seconds

    def throttle_next(self, method_key: str, times: int = 1) -> None:
        self.throttles[method_key] += times

    def preference(self, preference_id: str, project: str | None = None) -> resources.QuotaPreference:
        """A copy of the stored preference (contactEmail included, which Google never returns)."""
        with self.lock:
            out: resources.QuotaPreference = resources.QuotaPreference.wrap(
                copy.deepcopy(self._find(preference_id, project)[1])
            )
            return out

    def quota_value(self, service: str, quota_id: str, dimensions: Dims, project: str) -> int:
        with self.lock:
            return _value(self._info(self._project(project), service, quota_id) or {"dimensions_infos": []}, dimensions)

    def reset(self) -> None:
        with self.lock:
            for c in (self.calls, self.requests, self.violations, self.infos, self.prefs, self.numbers):
                c.clear()
            self.delays.clear()
            self.throttles.clear()

    def _project(self, segment: str) -> str:
        return self.numbers.get(segment, segment)

    def _find(self, preference_id: str, project: str | None) -> tuple[str, Pref]:
        want = None if project is None else self._project(project)
        hits = [(p, t[pid]) for p, t in self.prefs.items() for pid in t if pid == preference_id and want in (None, p)]
        if len(hits) != 1:
            raise KeyError(f"{len(hits)} preferences {preference_id}")
        return hits[0]

    def _info(self, project: str, service: str, quota_id: str) -> Res | None:
        if (project, service, quota_id) not in self.infos and ("*", service, quota_id) in self.infos:
            self.infos[(project, service, quota_id)] = copy.deepcopy(self.infos[("*", service, quota_id)])
        return self.infos.get((project, service, quota_id))

    # ---- server -------------------------------------------------------------------------------------------------
    def start(self) -> FakeQuotas:
        self._server, self.url = loopback.serve_json(self.handle)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    # ---- dispatch -----------------------------------------------------------------------------------------------
    def handle(self, verb: str, target: str, auth: str | None, raw: bytes) -> tuple[int, Res, float]:
        """(status, JSON body, seconds to wait before answering) for one HTTP request."""
        u = urlsplit(target)
        hit = next(((r, m) for r in ROUTES if r.verb == verb and (m := r.pattern.fullmatch(u.path))), None)
        with self.lock:
            if hit is None or not hit[0].faked:
                what = f"{hit[0].key} on {hit[0].template} (not faked)" if hit else "no route of the Cloud Quotas API"
                self.violations.append(f"{what}: {verb} {u.path}")
                return 404, QuotasError(404, f"{what}: {verb} {u.path}").body(), 0.0
            route, match = hit
            query = parse_qsl(u.query, keep_blank_values=True)
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                body = raw.decode(errors="replace")
            self.calls[route.key] += 1
            self.requests.append((route.key, dict(query), body))
            if not re.fullmatch(r"Bearer \S+", auth or ""):
                msg = "Request is missing required authentication credential. Expected OAuth 2 access token."
                return 401, QuotasError(401, msg).body(), 0.0
            q = dict(query)
            enum_ints = q.get("$alt", q.get("alt")) == "json;enum-encoding=int"
            probs = check_query(route, query)
            if "filter" in q:
                probs.append(f"{route.key}: filter={q['filter']!r}: the fake does not implement filter")
            if route.body:
                probs += check(
                    {} if body is None else body, resources.QuotaPreference, f"{route.key} body", response=False
                )
            elif body not in (None, {}):
                probs.append(f"{route.key}: takes no request body, got {body!r}")
            if probs:
                self.violations += probs
                return 400, QuotasError(400, "; ".join(probs)).body(), 0.0
            delay = self.delays.pop(route.key, 0.0)
            if self.throttles[route.key] > 0:
                self.throttles[route.key] -= 1
                msg = (
                    f"Quota exceeded for quota metric 'Requests' of service 'cloudquotas.googleapis.com' ({route.key})"
                )
                return 429, QuotasError(429, msg).body(), delay
            try:
                path = {k.replace("__", "."): unquote(v) for k, v in match.groupdict().items()}
                out = self._dispatch(route, path, q, body or {})
                out = to_json(out, enum_ints=enum_ints)
            except QuotasError as err:
                return err.code, err.body(), delay
            except Exception as err:  # the fake's own bug: a failed test, not a dropped connection
                self.violations.append(f"{route.key}: the fake failed: {err!r}")
                return 500, QuotasError(500, repr(err)).body(), delay
            probs = check(out, route.response, f"{route.key} response", response=True, enum_ints=enum_ints)
            if probs:
                self.violations += probs
                return 500, QuotasError(500, "; ".join(probs)).body(), delay
            return 200, out, delay

    def _dispatch(self, route: Route, path: dict[str, str], q: dict[str, str], body: Res) -> Any:
        name = path.get("name") or path.get("parent") or path["quota_preference.name"]
        parts = name.split("/")
        if parts[3] != "global":
            raise QuotasError(400, f"Invalid location '{parts[3]}' in '{name}': the location must be 'global'")
        project = self._project(parts[1])
        handler: Callable[..., Any] = getattr(self, "_" + snake(route.key).replace(".", "_"))
        return handler(project, parts, q, body)

    # ---- quota infos ------------------------------------------------------------------------------------------------
    def _info_message(self, project: str, info: Res) -> resources.QuotaInfo:
        prefix = f"projects/{project}/locations/global/services/{info['service']}"
        rows = [
            resources.DimensionsInfo(
                dimensions=r["dimensions"],
                details=resources.QuotaDetails(value=r["value"]),
                applicable_locations=r["applicable_locations"],
            )
            for r in _rows(info)
        ]
        return resources.QuotaInfo(
            name=f"{prefix}/quotaInfos/{info['quota_id']}",
            quota_id=info["quota_id"],
            metric=info["metric"],
            service=info["service"],
            is_precise=True,
            container_type=getattr(resources.QuotaInfo.ContainerType, info["container_type"]),
            dimensions=info["dimensions"],
            metric_unit=info["metric_unit"],
            quota_increase_eligibility=resources.QuotaIncreaseEligibility(is_eligible=info["eligible"]),
            is_fixed=info["is_fixed"],
            dimensions_infos=rows,
        )

    def _quota_infos_get(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        info = self._info(project, parts[5], parts[7])
        if info is None:
            raise QuotasError(404, f"QuotaInfo '{'/'.join(parts)}' not found")
        return self._info_message(project, info)

    def _quota_infos_list(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        ids = sorted({k[2] for k in self.infos if k[0] in ("*", project) and k[1] == parts[5]})
        infos = [self._info_message(project, i) for qid in ids if (i := self._info(project, parts[5], qid))]
        page, token = self._page(infos, q)
        return cloudquotas.ListQuotaInfosResponse(quota_infos=page, next_page_token=token)

    def _page(self, items: list[Any], q: dict[str, str]) -> tuple[list[Any], str]:
        size = int(q.get("pageSize") or PAGE_SIZE)
        if size < 0:
            raise QuotasError(400, f"Invalid page_size {size}: must not be negative")
        size, start = min(size or PAGE_SIZE, MAX_PAGE_SIZE), 0
        if q.get("pageToken"):
            try:
                start = int(base64.urlsafe_b64decode(q["pageToken"].encode()).decode().removeprefix("offset:"))
            except ValueError:
                raise QuotasError(400, f"Invalid page token '{q['pageToken']}'") from None
        more = start + size < len(items)
        return items[start : start + size], base64.urlsafe_b64encode(
            f"offset:{start + size}".encode()
        ).decode() if more else ""

    # ---- quota preferences -----------------------------------------------------------------------------------------
    def _name(self, project: str, pid: str) -> str:
        return f"projects/{project}/locations/global/quotaPreferences/{pid}"

    def _out(self, pref: Pref) -> Pref:
        out = copy.deepcopy(pref)
        out.ClearField("contact_email")  # input only: Google never returns it
        return out

    def _quota_preferences_get(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        pref = self.prefs.get(project, {}).get(parts[5])
        if pref is None:
            raise QuotasError(404, f"QuotaPreference '{'/'.join(parts)}' not found")
        return self._out(pref)

    def _quota_preferences_list(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        prefs = list(self.prefs.get(project, {}).values())  # by default in creation order
        for key in reversed([k.strip() for k in q.get("orderBy", "").split(",") if k.strip()]):
            field, _, direction = key.partition(" ")
            field = snake(field)
            if field not in ORDER_BY or direction not in ("", "asc", "desc"):
                raise QuotasError(400, f"Invalid order_by '{q['orderBy']}'")
            prefs.sort(key=functools.partial(_sort_key, field=field), reverse=direction == "desc")
        page, token = self._page(prefs, q)
        response = cloudquotas.ListQuotaPreferencesResponse.pb()
        return response(quota_preferences=[self._out(p) for p in page], next_page_token=token)

    def _quota_preferences_create(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        pid = q.get("quotaPreferenceId") or (body.get("name") or "").rpartition("/")[2]
        if body.get("name") and body["name"] != self._name(parts[1], pid) and body["name"] != self._name(project, pid):
            raise QuotasError(400, f"quota_preference.name '{body['name']}' does not match the parent and the id")
        pid = pid or f"qp-{secrets.token_hex(8)}"  # assumed: Google generates an id when none is given
        return self._create(project, pid, body, validate_only=False)

    def _create(self, project: str, pid: str, body: Res, *, validate_only: bool) -> Pref:
        if not ID_RE.fullmatch(pid):
            raise QuotasError(400, f"Invalid quota_preference_id '{pid}'")
        table = self.prefs.setdefault(project, {})
        if pid in table:
            raise QuotasError(409, f"QuotaPreference '{self._name(project, pid)}' already exists", "ALREADY_EXISTS")
        for field, present in (
            ("service", body.get("service")),
            ("quota_id", body.get("quotaId")),
            ("quota_config.preferred_value", "preferredValue" in body.get("quotaConfig", {})),
        ):
            if not present:
                raise QuotasError(400, f"Field 'quota_preference.{field}' is required")
        pref = self._parse(body)
        pref.name = self._name(project, pid)
        info = self._check_quota(project, pref)
        same = [p.name for p in table.values() if (p.service, p.quota_id, dict(p.dimensions)) == self._triple(pref)]
        if same:
            msg = f"A QuotaPreference for {self._triple(pref)} already exists: {same[0]}"
            raise QuotasError(409, msg, "ALREADY_EXISTS")
        self._submit(project, pref, info, None, validate_only=validate_only)
        pref.create_time.CopyFrom(pref.update_time)
        if not validate_only:
            table[pid] = pref
        return self._out(pref)

    def _quota_preferences_patch(self, project: str, parts: list[str], q: dict[str, str], body: Res) -> Any:
        pid, validate_only = parts[5], q.get("validateOnly") == "true"
        if body.get("name") and body["name"] not in (self._name(parts[1], pid), self._name(project, pid)):
            self.violations.append(f"quotaPreferences.patch: body name {body['name']!r} is not the path's")
        old = self.prefs.get(project, {}).get(pid)
        if old is None:
            if q.get("allowMissing") == "true":  # created; the update mask is ignored
                return self._create(project, pid, body, validate_only=validate_only)
            raise QuotasError(404, f"QuotaPreference '{'/'.join(parts)}' not found")
        if body.get("etag") and body["etag"] != old.etag:
            raise QuotasError(409, f"The etag '{body['etag']}' does not match the current etag '{old.etag}'", "ABORTED")
        given, new = self._parse(body), copy.deepcopy(old)
        paths = [snake(p.strip()) for p in q.get("updateMask", "").split(",") if p.strip()]
        if not paths or "*" in paths:  # no mask: every field a client sets (an absent immutable one is kept)
            paths = [*SETTABLE, *(f for f in IMMUTABLE if _present(body, f))]
        for path in paths:
            if path in IMMUTABLE and (getattr(given, path) != getattr(old, path)):
                raise QuotasError(400, f"Field 'quota_preference.{path}' is immutable: it cannot be changed")
            if path == "quota_config":
                new.quota_config.preferred_value = given.quota_config.preferred_value
                new.quota_config.ClearField("annotations")
                new.quota_config.annotations.update(given.quota_config.annotations)
            elif path == "quota_config.preferred_value":
                new.quota_config.preferred_value = given.quota_config.preferred_value
            elif path == "quota_config.annotations":
                new.quota_config.ClearField("annotations")
                new.quota_config.annotations.update(given.quota_config.annotations)
            elif path in ("justification", "contact_email"):
                setattr(new, path, getattr(given, path))
        if new.quota_config.preferred_value < -1:
            raise QuotasError(400, "quota_config.preferred_value must be greater than or equal to -1")
        info = self._check_quota(project, new)
        self._submit(project, new, info, old, validate_only=validate_only)
        if not validate_only:
            self.prefs[project][pid] = new
        return self._out(new)

    # ---- the rules --------------------------------------------------------------------------------------------------
    @staticmethod
    def _parse(body: Res) -> Pref:
        return resources.QuotaPreference.pb(resources.QuotaPreference.from_json(json.dumps(body)))

    @staticmethod
    def _triple(pref: Pref) -> tuple[str, str, Dims]:
        return pref.service, pref.quota_id, dict(pref.dimensions)

    def _check_quota(self, project: str, pref: Pref) -> Res:
        info = self._info(project, pref.service, pref.quota_id)
        if info is None:  # assumed: Google refuses a quota it does not know as an invalid argument
            raise QuotasError(400, f"Quota '{pref.quota_id}' of service '{pref.service}' not found")
        for key in pref.dimensions:
            if key not in info["dimensions"] or key in ("user", "resource"):
                raise QuotasError(400, f"Dimension '{key}' is not a dimension of quota '{pref.quota_id}' one may set")
        if pref.quota_config.preferred_value < -1:
            raise QuotasError(400, "quota_config.preferred_value must be greater than or equal to -1")
        return info

    def _submit(self, project: str, pref: Pref, info: Res, old: Pref | None, *, validate_only: bool) -> None:
        """An increase waits for Google (reconciling, a new trace id, contact email required); a decrease or the
        same value is granted at once. Either way a new etag and update time."""
        preferred = pref.quota_config.preferred_value
        changed = old is None or preferred != old.quota_config.preferred_value
        if changed and _increase(preferred, _value(info, dict(pref.dimensions))):
            if not pref.contact_email:
                raise QuotasError(400, "contact_email is required when requesting a quota increase")
            pref.reconciling = True
            pref.quota_config.trace_id = secrets.token_hex(16)
            pref.quota_config.ClearField("state_detail")
        elif changed:
            pref.quota_config.ClearField("trace_id")
            pref.quota_config.state_detail = "granted"  # assumed wording
            if not validate_only:
                self._grant(project, pref, preferred)
            else:
                pref.reconciling = False
                pref.quota_config.granted_value.value = preferred
        pref.etag = secrets.token_urlsafe(12)
        pref.update_time.GetCurrentTime()

    def _grant(self, project: str, pref: Pref, granted: int) -> None:
        pref.reconciling = False
        pref.quota_config.granted_value.value = granted
        pref.etag = secrets.token_urlsafe(12)
        pref.update_time.GetCurrentTime()
        info = self._info(project, pref.service, pref.quota_id)
        if info is None:
            return
        dims = dict(pref.dimensions)
        fallback = next((r for r in _rows(info) if r["dimensions"].items() <= dims.items()), None)
        where = [dims["region"]] if "region" in dims else fallback["applicable_locations"] if fallback else ["global"]
        info["dimensions_infos"] = [r for r in info["dimensions_infos"] if r["dimensions"] != dims]
        info["dimensions_infos"].append({"dimensions": dims, "value": granted, "applicable_locations": where})


def _sort_key(pref: Pref, field: str) -> Any:
    return getattr(pref, field).ToJsonString() if field.endswith("_time") else getattr(pref, field)


def _present(body: Res, field: str) -> bool:
    camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), field)
    return camel in body or field in body
