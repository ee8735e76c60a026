"""Cloud Quotas v1 as Google's own client library (google-cloud-quotas) defines it: the REST routes of
``_BaseCloudQuotasRestTransport`` (HTTP method + URI template + body field), the proto-plus request and response
types, and the field behaviours their docstrings state ("Output only.", "Input only.", "Immutable.", "Required.").
A strict checker of proto3 JSON against those types, for the Cloud Quotas fake (fake_quotas.py).

What the checker holds a request or response to, beyond protobuf's own ``json_format.Parse`` (unknown fields, wrong
JSON types): the JSON (lowerCamel) field names Google's library sends, int64 as JSON strings of digits and int32 as
JSON numbers (what Google sends; parsers accept either, so the client must not rely on that), no output-only field
in a request, no input-only field and no null in a response, timestamps in RFC 3339 (``Z`` in a response), enum
members by name (by number where the request asked for ``$alt=json;enum-encoding=int``, and in request bodies,
which Google's library sends that way).

Stricter than Google on purpose: Google accepts proto field names (snake_case) and int64 numbers in JSON, and
ignores output-only fields in a request (AIP-203; its own library sends them back on a read-modify-write update);
here each is a violation, so the client sends exactly what Google documents and its library emits."""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import Any

from google.cloud.cloudquotas_v1.services.cloud_quotas.transports.rest_base import _BaseCloudQuotasRestTransport
from google.cloud.cloudquotas_v1.types import cloudquotas, resources
from google.protobuf import json_format
from google.protobuf.descriptor_pb2 import FieldDescriptorProto

Res = dict[str, Any]
VERBS = {"Create": "create", "Get": "get", "List": "list", "Update": "patch"}  # the REST method names Google uses
INT64 = {"TYPE_INT64", "TYPE_UINT64", "TYPE_SINT64", "TYPE_FIXED64", "TYPE_SFIXED64"}
INT32 = {"TYPE_INT32", "TYPE_UINT32", "TYPE_SINT32", "TYPE_FIXED32", "TYPE_SFIXED32"}
SYSTEM_PARAMS = {"$alt", "alt", "prettyPrint", "$.xgafv"}  # Google's system parameters the fake understands
ALT = {"json", "json;enum-encoding=int"}
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
BEHAVIOUR = re.compile(r"((?:Required|Optional|Immutable|Identifier|Input only|Output only)\.\s*)+")


@dataclass(frozen=True)
class Route:
    key: str  # e.g. quotaPreferences.create
    rpc: str  # e.g. CreateQuotaPreference
    verb: str  # HTTP method, upper case
    template: str
    pattern: re.Pattern[str]
    body: str | None  # the request field the body holds
    request: Any  # proto-plus message classes
    response: Any
    faked: bool  # the project routes; the folder and organization ones are not faked


def _regex(template: str) -> re.Pattern[str]:
    """``/v1/{parent=projects/*/locations/*}/quotaPreferences`` -> a regex with a group per variable (``.`` in a
    variable's name becomes ``__``)."""

    def var(part: str) -> str:
        name, _, pat = part[1:-1].partition("=")
        rx = "/".join("[^/]+" if s == "*" else ".+" if s == "**" else re.escape(s) for s in (pat or "*").split("/"))
        return f"(?P<{name.replace('.', '__')}>{rx})"

    parts = re.split(r"(\{[^}]*\})", template)
    return re.compile("".join(var(p) if p.startswith("{") else re.escape(p) for p in parts))


def _routes() -> list[Route]:
    out = []
    for cls_name, cls in vars(_BaseCloudQuotasRestTransport).items():
        if not (cls_name.startswith("_Base") and hasattr(cls, "_get_http_options")):
            continue
        rpc = cls_name[len("_Base") :]
        verb, noun = next((v, rpc[len(v) :]) for v in VERBS if rpc.startswith(v))
        request = getattr(cloudquotas, f"{rpc}Request")
        response = getattr(cloudquotas, f"{rpc}Response", None) or getattr(resources, noun.removesuffix("s"))
        key = f"{noun[0].lower()}{noun[1:].removesuffix('s')}s.{VERBS[verb]}"
        for opt in cls._get_http_options():
            faked = re.search(r"=projects/", opt["uri"]) is not None
            route = Route(
                key,
                rpc,
                opt["method"].upper(),
                opt["uri"],
                _regex(opt["uri"]),
                opt.get("body"),
                request,
                response,
                faked,
            )
            out.append(route)
    return out


ROUTES = _routes()


# ---- field behaviours from the docstrings ---------------------------------------------------------------------------
def _behaviours() -> dict[tuple[str, str], set[str]]:
    """(message full name, field name) -> {"Output only", "Input only", "Immutable", "Required", ...}, read from the
    "Attributes:" section of each proto-plus class's docstring; a message documented "[Output only]" as a whole
    makes each of its fields output only."""
    out: dict[tuple[str, str], set[str]] = {}
    for module in (resources, cloudquotas):
        for name in module.__protobuf__.manifest:
            cls = getattr(module, name)
            if not hasattr(cls, "pb"):
                continue  # an enum
            doc = inspect.cleandoc(cls.__doc__ or "")
            whole = {"Output only"} if doc.lower().startswith("[output only]") else set()
            full = cls.pb().DESCRIPTOR.full_name
            for field, desc in re.findall(r"^    (\w+) \([^\n]*\):\n        ([^\n]*)", doc, re.M):
                m = BEHAVIOUR.match(desc)
                out[(full, field)] = whole | (
                    {b.strip(" .") for b in re.findall(r"[^.]+\.", m.group(0))} if m else set()
                )
    return out


BEHAVIOURS = _behaviours()


def behaviour(field: Any, what: str) -> bool:
    return what in BEHAVIOURS.get((field.containing_type.full_name, field.name), set())


def _ftype(field: Any) -> str:
    return str(FieldDescriptorProto.Type.Name(field.type))


def _is_map(field: Any) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


# ---- the checker ------------------------------------------------------------------------------------------------------
def check(value: Any, message: Any, where: str, *, response: bool, enum_ints: bool = False) -> list[str]:
    """Problems of the JSON ``value`` as the proto-plus ``message`` type (a request body or a response)."""
    try:
        json_format.Parse(json.dumps(value), message.pb()(), ignore_unknown_fields=False)
    except json_format.ParseError as err:
        return [f"{where}: {err}".splitlines()[0]]
    return _walk(value, message.pb().DESCRIPTOR, where, response=response, enum_ints=enum_ints or not response)


def _walk(value: Any, desc: Any, where: str, *, response: bool, enum_ints: bool) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: expected a JSON object, got {value!r}"]
    probs: list[str] = []
    by_json = {f.json_name: f for f in desc.fields}
    by_name = {f.name: f for f in desc.fields}
    for k, v in value.items():
        f = by_json.get(k)
        if f is None:
            f = by_name[k]  # Parse accepted it: the proto field name
            probs.append(f"{where}.{k}: the proto field name; Google's JSON name is {f.json_name}")
        at = f"{where}.{f.json_name}"
        if v is None:
            probs += [f"{at}: null in a response"] if response else []
            continue
        if not response and behaviour(f, "Output only"):
            probs.append(f"{at}: output-only field sent by the client")
        if response and behaviour(f, "Input only"):
            probs.append(f"{at}: input-only field in a response")
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            probs += [p for mk, mv in v.items() for p in _value(mv, vf, f"{at}[{mk!r}]", response, enum_ints)]
        elif f.is_repeated:
            probs += [p for i, item in enumerate(v) for p in _value(item, f, f"{at}[{i}]", response, enum_ints)]
        else:
            probs += _value(v, f, at, response, enum_ints)
    return probs


def _value(v: Any, f: Any, at: str, response: bool, enum_ints: bool) -> list[str]:
    t, got = _ftype(f), f"got {type(v).__name__} {v!r}"
    if t == "TYPE_MESSAGE":
        wkt = f.message_type.full_name
        if wkt == "google.protobuf.Timestamp":
            if response and not str(v).endswith("Z"):
                return [f"{at}: {v!r} is not an RFC 3339 time in UTC (Z)"]
            return [] if RFC3339.fullmatch(str(v)) else [f"{at}: {v!r} is not an RFC 3339 timestamp"]
        if wkt.startswith("google.protobuf.") and wkt.endswith("Value") and "value" in f.message_type.fields_by_name:
            return _value(v, f.message_type.fields_by_name["value"], at, response, enum_ints)  # a wrapper: its value
        if wkt.startswith("google.protobuf."):
            return []  # FieldMask, Duration, Struct: Parse has checked them
        return _walk(v, f.message_type, at, response=response, enum_ints=enum_ints)
    if t in INT64 and not isinstance(v, str):
        return [f"{at}: an int64 must be sent as a JSON string of digits, {got}"]
    if t in INT64 and not re.fullmatch(r"-?\d+", v):
        return [f"{at}: {v!r} is not an int64 string of digits"]
    if t in INT32 and not isinstance(v, int):
        return [f"{at}: an int32 is a JSON number, {got}"]
    if t == "TYPE_ENUM" and isinstance(v, int) and not enum_ints:
        return [f"{at}: enum by number ({v}) where names were asked for"]
    if t == "TYPE_ENUM" and isinstance(v, str) and response and enum_ints:
        return [f"{at}: enum by name ({v!r}) where $alt=json;enum-encoding=int asked for numbers"]
    return []


def check_query(route: Route, query: list[tuple[str, str]]) -> list[str]:
    """Problems of the query string: each parameter a field of the request message (its JSON name) not bound by the
    path or the body, or a system parameter; typed as the field; a non-repeated one given once; the update mask's
    paths fields of QuotaPreference that a client may set."""
    desc, probs = route.request.pb().DESCRIPTOR, []
    bound = {v.split(".")[0] for v in re.findall(r"\{([\w.]+)", route.template)} | {route.body}
    fields = {f.json_name: f for f in desc.fields if f.name not in bound}
    counts: dict[str, int] = {}
    for name, value in query:
        counts[name] = counts.get(name, 0) + 1
        f, bad = fields.get(name), f"{route.key}: query parameter {name}={value!r}"
        if name in SYSTEM_PARAMS:
            if name.endswith("alt") and value not in ALT:
                probs.append(f"{bad} is not one of {sorted(ALT)}")
            continue
        if f is None:
            probs.append(f"{route.key}: unknown query parameter {name}={value!r}")
            continue
        if counts[name] > 1 and not f.is_repeated:
            probs.append(f"{route.key}: query parameter {name} given {counts[name]} times")
        t = _ftype(f)
        if t in INT32 and not (re.fullmatch(r"-?\d+", value) and -(2**31) <= int(value) < 2**31):
            probs.append(f"{bad} is not an int32")
        elif t == "TYPE_BOOL" and value not in ("true", "false"):
            probs.append(f"{bad} is not true/false")
        elif (
            t == "TYPE_ENUM"
            and value not in f.enum_type.values_by_name
            and not (value.isdigit() and int(value) in f.enum_type.values_by_number)
        ):
            probs.append(f"{bad} is not one of {list(f.enum_type.values_by_name)}")
        elif t == "TYPE_MESSAGE" and f.message_type.full_name == "google.protobuf.FieldMask":
            probs += [f"{bad}: {p}" for p in mask_problems(value)]
    return probs


def snake(path: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), path)


def mask_problems(mask: str) -> list[str]:
    """An update mask's paths (lowerCamel or snake_case, comma-separated) must name fields of QuotaPreference the
    client may set: no unknown, output-only or ``name`` path."""
    probs: list[str] = []
    for path in mask.split(","):
        if path == "*":
            continue
        desc, f = resources.QuotaPreference.pb().DESCRIPTOR, None
        for part in snake(path.strip()).split("."):
            f = desc.fields_by_name.get(part) if desc is not None else None
            if f is None:
                probs.append(f"update mask path {path!r} is not a field of QuotaPreference")
                break
            if behaviour(f, "Output only") or f.name == "name":
                probs.append(f"update mask path {path!r} is not a field a client sets")
                break
            desc = f.message_type if not _is_map(f) else None
    return probs


def to_json(message: Any, *, enum_ints: bool = False) -> Res:
    """A proto-plus or protobuf message as Google's proto3 JSON: lowerCamel names, defaults left out."""
    pb = getattr(message, "_pb", message)
    out: Res = json_format.MessageToDict(pb, use_integers_for_enums=enum_ints)
    return out
