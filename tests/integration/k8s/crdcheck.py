"""Offline check of an object against a CRD version's openAPIV3Schema, x-kubernetes-validations included.

1.20 neither runs CEL rules nor refuses unknown fields, so an object it accepts may still be one a current
cluster refuses. This converts the structural schema to JSON Schema (jsonschema, Draft 7; unknown fields are
refused unless ``x-kubernetes-preserve-unknown-fields``) and evaluates every ``x-kubernetes-validations`` rule
on the matching value with cel-python. Rules that need ``oldSelf`` (transition rules) are skipped (an object
being created has no old self); rules using Kubernetes-only CEL libraries cel-python lacks are reported as
``unsupported`` rather than silently passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml


def crd_schema(crd_file: Path, version: str) -> dict[str, Any]:
    doc = yaml.safe_load(crd_file.read_text())
    for v in doc["spec"]["versions"]:
        if v["name"] == version:
            return dict(v["schema"]["openAPIV3Schema"])
    raise KeyError(version)


def to_json_schema(s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if s.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    elif "type" in s:
        out["type"] = [s["type"], "null"] if s.get("nullable") else s["type"]
    for k in ("enum", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems", "maxItems",
              "required", "minProperties", "maxProperties", "format"):  # fmt: skip
        if k in s and not (k == "format" and s[k] not in ("date-time",)):
            out[k] = s[k]
    if "properties" in s:
        out["properties"] = {k: to_json_schema(v) for k, v in s["properties"].items()}
        if not s.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if isinstance(s.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(s["additionalProperties"])
    if "items" in s:
        out["items"] = to_json_schema(s["items"])
    for k in ("allOf", "anyOf", "oneOf"):
        if k in s:
            out[k] = [to_json_schema(x) for x in s[k]]
    return out


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    rules_checked: int = 0
    unsupported: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def _cel(rule: str, value: Any) -> bool:
    env = celpy.Environment()
    prog = env.program(env.compile(rule))
    got = prog.evaluate({"self": celpy.json_to_cel(value)})
    if isinstance(got, Exception):
        raise got
    return bool(got)


def _walk(s: dict[str, Any], value: Any, path: str, rep: Report) -> None:
    for v in s.get("x-kubernetes-validations") or []:
        rule = v["rule"]
        if "oldSelf" in rule:
            continue
        try:
            ok = _cel(rule, value)
        except Exception as exc:  # a CEL library function cel-python does not know
            rep.unsupported.append(f"{path}: {rule} ({type(exc).__name__})")
            continue
        rep.rules_checked += 1
        if not ok:
            rep.errors.append(f"{path}: CEL rule failed: {v.get('message') or rule}")
    if isinstance(value, dict):
        props = s.get("properties") or {}
        for k, sub in value.items():
            if k in props:
                _walk(props[k], sub, f"{path}.{k}", rep)
            elif isinstance(s.get("additionalProperties"), dict):
                _walk(s["additionalProperties"], sub, f"{path}.{k}", rep)
    elif isinstance(value, list) and isinstance(s.get("items"), dict):
        for i, item in enumerate(value):
            _walk(s["items"], item, f"{path}[{i}]", rep)


def check(obj: dict[str, Any], crd_file: Path) -> Report:
    version = obj["apiVersion"].split("/")[-1]
    schema = crd_schema(crd_file, version)
    rep = Report()
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    js = to_json_schema(schema)
    js.get("properties", {}).pop("metadata", None)
    js.get("properties", {}).pop("apiVersion", None)
    js.get("properties", {}).pop("kind", None)
    for err in jsonschema.Draft7Validator(js).iter_errors(body):
        rep.errors.append(f"{'.'.join(map(str, err.absolute_path)) or '<root>'}: {err.message}")
    _walk(schema, body, obj["kind"], rep)
    return rep
