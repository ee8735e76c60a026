"""The wire formats of EC2 (query protocol in, XML out) and of the JSON services (Service Quotas, Pricing), driven
by botocore's service models -- AWS's own API definitions -- so the fake cannot drift from the API.

Every request is parsed by the operation's input shape (an unknown parameter is a violation) and checked with
botocore's ``ParamValidator``; every response is checked against the output shape before it is serialized.
A violation raises :class:`WireViolation`; the fake answers it with a 400 and records it, and the tests assert
that no violation was recorded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import escape

import botocore.session
from botocore.model import OperationModel, ServiceModel, Shape, StructureShape
from botocore.validate import ParamValidator

_SESSION = botocore.session.get_session()
MODELS: dict[str, ServiceModel] = {
    name: _SESSION.get_service_model(name) for name in ("ec2", "service-quotas", "pricing")
}


class WireViolation(Exception):
    """A request or response that does not fit botocore's model of the operation."""


def validate(shape: Shape, value: dict[str, Any], what: str) -> None:
    report = ParamValidator().validate(value, shape)
    if report.has_errors():
        raise WireViolation(f"{what}: {report.generate_report()}")


# ---- EC2 query protocol: form fields in ----------------------------------------------------------------------
def _query_name(shape: Shape, default: str) -> str:
    if "queryName" in shape.serialization:
        return str(shape.serialization["queryName"])
    if "name" in shape.serialization:
        name = str(shape.serialization["name"])
        return name[0].upper() + name[1:]
    return default


def _scalar(shape: Shape, raw: str) -> Any:
    t = shape.type_name
    if t in ("integer", "long"):
        return int(raw)
    if t in ("double", "float"):
        return float(raw)
    if t == "boolean":
        return raw == "true"
    if t == "timestamp":
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    return raw


def _parse(shape: Shape, name: str, form: dict[str, str], used: set[str]) -> Any:
    if shape.type_name == "structure":
        assert isinstance(shape, StructureShape)
        out = {}
        for member, mshape in shape.members.items():
            key = _query_name(mshape, member)
            value = _parse(mshape, f"{name}.{key}" if name else key, form, used)
            if value is not None:
                out[member] = value
        return out or None
    if shape.type_name == "list":
        items = []
        i = 1
        while any(k == f"{name}.{i}" or k.startswith(f"{name}.{i}.") for k in form):
            items.append(_parse(shape.member, f"{name}.{i}", form, used))  # type: ignore[attr-defined]
            i += 1
        return items or None
    if name in form:
        used.add(name)
        return _scalar(shape, form[name])
    return None


def parse_ec2_request(operation: OperationModel, form: dict[str, str]) -> dict[str, Any]:
    """The boto3-style parameters of an EC2 query request; refuses unknown fields and model violations."""
    used: set[str] = set()
    params = _parse(operation.input_shape, "", form, used) or {}
    unknown = sorted(set(form) - used - {"Action", "Version"})
    if unknown:
        raise WireViolation(f"{operation.name} request: fields not in the model: {unknown}")
    validate(operation.input_shape, params, f"{operation.name} request")
    return dict(params)


# ---- EC2 XML out ---------------------------------------------------------------------------------------------
def _iso(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _xml(shape: Shape, value: Any) -> str:
    t = shape.type_name
    if t == "structure":
        assert isinstance(shape, StructureShape)
        parts = []
        for member, v in value.items():
            mshape = shape.members[member]
            tag = mshape.serialization.get("name", member)
            parts.append(f"<{tag}>{_xml(mshape, v)}</{tag}>")
        return "".join(parts)
    if t == "list":
        tag = shape.member.serialization.get("name", "member")  # type: ignore[attr-defined]
        return "".join(f"<{tag}>{_xml(shape.member, v)}</{tag}>" for v in value)  # type: ignore[attr-defined]
    if t == "timestamp":
        return _iso(value)
    if t == "boolean":
        return "true" if value else "false"
    return escape(str(value))


def ec2_response(operation: OperationModel, data: dict[str, Any], request_id: str) -> bytes:
    validate(operation.output_shape, data, f"{operation.name} response")
    body = _xml(operation.output_shape, data)
    ns = "http://ec2.amazonaws.com/doc/2016-11-15/"
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{operation.name}Response xmlns="{ns}">'
        f"<requestId>{request_id}</requestId>{body}</{operation.name}Response>"
    ).encode()


def ec2_error(code: str, message: str, request_id: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{escape(code)}</Code>'
        f"<Message>{escape(message)}</Message></Error></Errors><RequestID>{request_id}</RequestID></Response>"
    ).encode()


# ---- JSON protocol (Service Quotas, Pricing) -------------------------------------------------------------------
def parse_json_request(operation: OperationModel, body: bytes) -> dict[str, Any]:
    params = json.loads(body or b"{}")
    if not isinstance(params, dict):
        raise WireViolation(f"{operation.name} request: body is not a JSON object")
    validate(operation.input_shape, params, f"{operation.name} request")
    return params


def _jsonable(shape: Shape, value: Any) -> Any:
    t = shape.type_name
    if t == "structure":
        assert isinstance(shape, StructureShape)
        return {k: _jsonable(shape.members[k], v) for k, v in value.items()}
    if t == "list":
        return [_jsonable(shape.member, v) for v in value]  # type: ignore[attr-defined]
    if t == "map":
        return {k: _jsonable(shape.value, v) for k, v in value.items()}  # type: ignore[attr-defined]
    if t == "timestamp":
        return value.timestamp()
    return value


def json_response(operation: OperationModel, data: dict[str, Any]) -> bytes:
    validate(operation.output_shape, data, f"{operation.name} response")
    return json.dumps(_jsonable(operation.output_shape, data)).encode()


def json_error(code: str, message: str) -> bytes:
    return json.dumps({"__type": code, "message": message}).encode()
