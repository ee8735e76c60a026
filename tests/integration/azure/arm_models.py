"""Azure Resource Manager's Compute API as Microsoft's own SDK (azure-mgmt-compute, TypeSpec-generated) defines it:
the routes of its request builders (``build_<group>_<operation>_request`` in ``operations/_operations.py``: HTTP method,
URL template, query parameters, default ``api-version``), the body and response models its operation methods use,
and the fields of those models (``rest_field(name=..., visibility=[...], format=...)`` and the type annotations).
A strict checker of JSON against those models, for the Azure fake (fake_azure.py).

What the checker holds a request body or a response to: every key a field's REST name (a Python attribute name where
the REST name differs, e.g. ``provisioning_state`` for ``provisioningState``, is named as such; any other key is
unknown); the JSON type of the annotation (``str``, ``int`` not ``bool``, ``float``, ``bool``, lists, string maps,
models recursively); a value of an SDK enum (``Union[str, SomeEnum]``, "Known values are ...") one of its known
values; no read-only field (``visibility == ["read"]``) in a request; a ``datetime`` field an RFC 3339 string in a
response (``format="rfc3339"``); no null in a response. And ``sdk_reads``: the SDK model built from the response
JSON (``Model(mapping)``, its public way to wrap raw JSON) and every attribute read, recursively, so the SDK's own
deserializers (datetimes, enums, nested models) accept what the fake sends.

Stricter than Azure on purpose: ARM ignores read-only properties in a PUT and accepts unknown enum values of its
extensible enums; here each is a violation, so the client sends exactly what the SDK would send.
"""

from __future__ import annotations

import enum
import functools
import inspect
import re
import types
import typing
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from azure.mgmt.compute import models
from azure.mgmt.compute._utils.model_base import Model
from azure.mgmt.compute.operations import _operations as ops

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)")
Res = dict[str, Any]


@dataclass(frozen=True)
class Route:
    key: str  # the SDK's operation group and name, e.g. capacityReservations.createOrUpdate
    verb: str
    template: str  # e.g. /subscriptions/{subscriptionId}/resourceGroups/{resourceGroupName}/...
    pattern: re.Pattern[str]
    api_version: str  # the builder's default
    query: dict[str, frozenset[str] | None]  # query parameter -> its enum's known values (None: any string)
    body: type[Model] | None  # the request body's model (the operation's ``parameters``)
    response: type[Model] | None  # the model of the answer (of each item for a list)
    paged: bool


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _enum_values(annotation: Any) -> frozenset[str] | None:
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, enum.Enum):
            return frozenset(str(m.value) for m in arg)
        if (inner := _enum_values(arg)) is not None:
            return inner
    return None


@functools.cache
def _lines(filename: str) -> list[str]:
    return Path(filename).read_text().splitlines(keepends=True)


@functools.cache
def _last_line(code: types.CodeType) -> int:
    ends = [pos[1] for pos in code.co_positions() if pos[1] is not None]
    nested = [_last_line(c) for c in code.co_consts if isinstance(c, types.CodeType)]
    return max([code.co_firstlineno, *ends, *nested])


def _source(fn: Any) -> str:
    """``inspect.getsource(fn)`` from the code object's own line table: its first line (decorators included) to
    the last line any of its instructions spans. ``inspect.getsource`` tokenizes the file from the function's start
    for each of ~1,000 functions here: 1.6 s of CPU in every pytest process's collection, since the Azure tests' files
    import this module. tests/integration/azure/test_fake_azure.py checks that both give the same text."""
    lines = _lines(fn.__code__.co_filename)
    return "".join(lines[fn.__code__.co_firstlineno - 1 : _last_line(fn.__code__)])


def _callers() -> dict[str, tuple[type, str]]:
    """Request builder name -> (its operations class, the public operation name), from the classes' sources."""
    out: dict[str, tuple[type, str]] = {}
    for cname, cls in vars(ops).items():
        if not (cname.endswith("Operations") and isinstance(cls, type)):
            continue
        for mname, member in vars(cls).items():
            if not callable(member) or mname.startswith("__"):
                continue
            op = mname.lstrip("_").removeprefix("begin_").removesuffix("_initial")
            for builder in re.findall(r"\b(build_\w+_request)\(", _source(inspect.unwrap(member))):
                out.setdefault(builder, (cls, op))
    return out


def _routes() -> list[Route]:
    out = []
    for builder, (cls, op) in _callers().items():
        src = _source(getattr(ops, builder))
        template = re.search(r'_url = "([^"]+)"', src)
        verb = re.search(r'HttpRequest\(method="(\w+)"', src)
        version = re.search(r'_params\.pop\("api-version", "([^"]+)"\)', src)
        if not (template and verb and version):
            continue  # a builder of another shape (none among the Compute routes)
        sig = inspect.signature(getattr(ops, builder)).parameters
        query = {
            name: (_enum_values(sig[arg].annotation) if arg in sig else None)
            for name, arg in re.findall(r'_params\["([^"]+)"\] = _SERIALIZER\.query\("(\w+)"', src)
        }
        method = getattr(cls, op, None) or getattr(cls, f"begin_{op}", None)
        msrc = _source(inspect.unwrap(method)) if method else ""
        body = re.search(r"parameters: Union\[_models\.(\w+)", msrc)
        resp = re.search(r"(?<![\w.])_deserialize\(\s*(List\[)?_models\.(\w+)", msrc)
        group = cls.__name__.removesuffix("Operations") or "Operations"
        pattern = re.compile(re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(template.group(1))))
        out.append(
            Route(
                key=f"{group[0].lower()}{group[1:]}.{_camel(op)}",
                verb=verb.group(1),
                template=template.group(1),
                pattern=pattern,
                api_version=version.group(1),
                query=query,
                body=getattr(models, body.group(1)) if body else None,
                response=getattr(models, resp.group(2)) if resp else None,
                paged=bool(resp and resp.group(1)),
            )
        )
    return out


def __getattr__(name: str) -> Any:
    """``ROUTES``: every route, read from the SDK on first use (not when a test file importing this is collected)."""
    if name == "ROUTES":
        return _all_routes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _all_routes() -> list[Route]:
    return _routes()


def find(verb: str, path: str) -> tuple[Route, dict[str, str]] | None:
    for r in _all_routes():
        if r.verb == verb and (m := r.pattern.fullmatch(path)):
            return r, m.groupdict()
    return None


# ---- the models' fields -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    attr: str  # the Python attribute
    rest: str  # the JSON name
    read_only: bool
    format: str | None
    annotation: Any


_FIELDS: dict[type, dict[str, Field]] = {}


def fields(model: type[Model]) -> dict[str, Field]:
    """The model's fields by REST name (the SDK computes its field table when the class is first instantiated)."""
    if model not in _FIELDS:
        model({})
        hints = typing.get_type_hints(model, localns={"_models": models})
        table = model._attr_to_rest_field  # type: ignore[attr-defined]
        _FIELDS[model] = {
            rf._rest_name: Field(a, rf._rest_name, rf._visibility == ["read"], rf._format, hints[a])
            for a, rf in table.items()
        }
    return _FIELDS[model]


def _strip_optional(t: Any) -> Any:
    args = typing.get_args(t)
    if typing.get_origin(t) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
    return t


# ---- the checker ----------------------------------------------------------------------------------------------------
def check(value: Any, model: type[Model], where: str, *, response: bool) -> list[str]:
    """Problems of the JSON ``value`` as the SDK ``model`` (a request body or a response)."""
    if not isinstance(value, dict):
        return [f"{where}: expected a JSON object, got {value!r}"]
    table = fields(model)
    by_attr = {f.attr: f for f in table.values()}
    probs: list[str] = []
    for k, v in value.items():
        f = table.get(k)
        if f is None:
            hit = by_attr.get(k) or by_attr.get(_snake(k))
            if hit is not None and hit.rest != k:
                probs.append(f"{where}.{k}: the SDK's Python name; the REST name is {hit.rest!r}")
            else:
                probs.append(f"{where}.{k}: unknown field of {model.__name__}")
            continue
        at = f"{where}.{k}"
        if v is None:
            probs += [f"{at}: null in a response"] if response else []
            continue
        if not response and f.read_only:
            probs.append(f"{at}: read-only field (visibility ['read']) sent by the client")
        probs += _value(v, f.annotation, f, at, response)
    return probs


def _value(v: Any, t: Any, f: Field, at: str, response: bool) -> list[str]:
    t = _strip_optional(t)
    origin, args = typing.get_origin(t), typing.get_args(t)
    got = f"got {type(v).__name__} {v!r}"
    if t is Any:
        return []
    if isinstance(t, type) and issubclass(t, Model):
        return check(v, t, at, response=response)
    if origin is list:
        if not isinstance(v, list):
            return [f"{at}: expected a JSON array, {got}"]
        return [p for i, item in enumerate(v) for p in _value(item, args[0], f, f"{at}[{i}]", response)]
    if origin is dict:
        if not isinstance(v, dict):
            return [f"{at}: expected a JSON object (a map), {got}"]
        return [p for k, item in v.items() for p in _value(item, args[1], f, f"{at}[{k!r}]", response)]
    if origin is typing.Literal:  # a constant (Usage.unit: "Count")
        return [] if v in args else [f"{at}: expected one of {list(args)}, {got}"]
    if origin in (typing.Union, types.UnionType):  # Union[str, SomeEnum]: an extensible enum
        known = _enum_values(t)
        if not isinstance(v, str):
            return [f"{at}: expected a string, {got}"]
        return [] if known is None or v in known else [f"{at}: {v!r} is not a known value {sorted(known)}"]
    if t is datetime:
        if not isinstance(v, str):
            return [f"{at}: expected a date-time string, {got}"]
        if f.format == "rfc3339" and not RFC3339.fullmatch(v):
            return [f"{at}: {v!r} is not an RFC 3339 date-time"]
        return []
    if t is bool:
        return [] if isinstance(v, bool) else [f"{at}: expected a JSON boolean, {got}"]
    if t is int:
        return [] if isinstance(v, int) and not isinstance(v, bool) else [f"{at}: expected a JSON integer, {got}"]
    if t is float:
        ok = isinstance(v, int | float) and not isinstance(v, bool)
        return [] if ok else [f"{at}: expected a JSON number, {got}"]
    if t is str:
        return [] if isinstance(v, str) else [f"{at}: expected a JSON string, {got}"]
    return [f"{at}: the checker does not know the type {t!r}"]


def check_page(value: Any, item: type[Model], where: str) -> list[str]:
    """A list answer: ``{"value": [...], "nextLink": "..."}`` (the keys the SDK's pager reads)."""
    if not isinstance(value, dict) or not isinstance(value.get("value"), list):
        return [f"{where}: expected {{'value': [...]}}, got {value!r}"]
    probs = [f"{where}.{k}: unknown key of a page" for k in value if k not in ("value", "nextLink")]
    if "nextLink" in value and not isinstance(value["nextLink"], str):
        probs.append(f"{where}.nextLink: expected a string, got {value['nextLink']!r}")
    return probs + [
        p for i, v in enumerate(value["value"]) for p in check(v, item, f"{where}.value[{i}]", response=True)
    ]


def sdk_reads(value: Res, model: type[Model], where: str) -> list[str]:
    """Problems the SDK itself has with ``value``: the model wrapped around the JSON and every attribute read, each
    of the Python type the SDK declares (its deserializers hand back the raw string when they cannot parse one)."""
    try:
        return _read(model(value), model, where)
    except Exception as err:  # the SDK's deserializers raise what they raise
        return [f"{where}: the SDK's {model.__name__} cannot read it: {err!r}"]


def _read(obj: Any, t: Any, at: str) -> list[str]:
    t = _strip_optional(t)
    origin, args = typing.get_origin(t), typing.get_args(t)
    if obj is None or t is Any:
        return []
    if isinstance(t, type) and issubclass(t, Model):
        if not isinstance(obj, t):
            return [f"{at}: the SDK read {obj!r}, not a {t.__name__}"]
        return [p for f in fields(t).values() for p in _read(getattr(obj, f.attr), f.annotation, f"{at}.{f.rest}")]
    if origin is list:
        return [p for i, item in enumerate(obj) for p in _read(item, args[0], f"{at}[{i}]")]
    if origin is dict:
        return [p for k, item in obj.items() for p in _read(item, args[1], f"{at}[{k!r}]")]
    if origin is typing.Literal:
        return [] if obj in args else [f"{at}: the SDK read {obj!r}, not one of {list(args)}"]
    want = str if origin in (typing.Union, types.UnionType) else t
    ok = isinstance(obj, want) and not (want is int and isinstance(obj, bool))
    return [] if ok else [f"{at}: the SDK read {obj!r}, not a {getattr(want, '__name__', want)}"]
