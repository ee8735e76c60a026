"""A stateful fake of the AWS calls moto lacks, on loopback HTTP, speaking the real wire format.

EC2 (query protocol): CreateCapacityReservation (ClientToken idempotent, as AWS documents),
DescribeCapacityReservations (ids, ``tag:<key>``, ``tag-key``, ``state``, ``instance-type`` filters),
ModifyCapacityReservation, CancelCapacityReservation, DescribeCapacityBlockOfferings, PurchaseCapacityBlock.
Every other EC2 action is forwarded unchanged to moto server (instances, spot price history, ...).
Service Quotas (JSON): GetServiceQuota, RequestServiceQuotaIncrease, GetRequestedServiceQuotaChange,
ListRequestedServiceQuotaChangeHistoryByQuota. Pricing (JSON): GetProducts.

Requests and responses pass through :mod:`tests.integration.aws.wire` (botocore's model); a violation is answered with
a 400 and kept in ``violations``. Faults for tests: ``refuse_capacity(instance_type)`` answers RunInstances and
CreateCapacityReservation with InsufficientInstanceCapacity (HTTP 500, as EC2 does); ``delay_next(action, s)``
performs the next such call and answers only after ``s`` seconds (a lost answer); ``throttle_next(action)``
answers once with RequestLimitExceeded. The provider's lifecycle moves only when a test says so
(``set_state``, ``set_request_status``): the fake has no clock of its own.
"""

from __future__ import annotations

import hashlib
import http.client
import itertools
import json
import re
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from tests import loopback
from tests.integration.aws import wire

EC2_ACTIONS = frozenset(
    {
        "CreateCapacityReservation",
        "DescribeCapacityReservations",
        "ModifyCapacityReservation",
        "CancelCapacityReservation",
        "DescribeCapacityBlockOfferings",
        "PurchaseCapacityBlock",
    }
)
ACCOUNT = "123456789012"
# on-demand $/instance-hour of the fake price list (AWS us-east-1 list prices, January 2026, as in the catalog)
ON_DEMAND_USD_H = {
    "p6-b200.48xlarge": "113.9328",
    "p5en.48xlarge": "63.296",
    "p5.48xlarge": "55.04",
    "p4de.24xlarge": "27.44705",
    "g6e.48xlarge": "30.13118",
    "g6.48xlarge": "13.3504",
}
DEFAULT_QUOTAS_VCPUS = {"L-417A185B": 384.0, "L-DB2E81BA": 768.0, "L-7212CCBC": 192.0, "L-3819A6DF": 384.0}
QUOTA_NAMES = {
    "L-417A185B": "Running On-Demand P instances",
    "L-DB2E81BA": "Running On-Demand G and VT instances",
    "L-7212CCBC": "All P Spot Instance Requests",
    "L-3819A6DF": "All G and VT Spot Instance Requests",
}


class FakeAws:
    def __init__(self, moto_url: str | None) -> None:
        self.moto_url = moto_url
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.violations: list[str] = []
        self.reservations: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}
        self.offerings: dict[str, dict[str, Any]] = {}
        self.withdrawn: set[str] = set()  # Capacity Block offerings no longer listed
        self.quotas: dict[tuple[str, str], float] = {}
        self.quota_requests: dict[str, dict[str, Any]] = {}
        self.no_capacity: set[tuple[str, str | None]] = set()
        self.delays: dict[str, float] = {}
        self.throttles: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # ---- test controls ----------------------------------------------------------------------------------
    def refuse_capacity(self, instance_type: str, region: str | None = None) -> None:
        """Refuse launches and reservations of the type (in ``region``, or everywhere) for capacity."""
        self.no_capacity.add((instance_type, region))

    def _refused(self, instance_type: str | None, region: str) -> bool:
        return (instance_type, None) in self.no_capacity or (instance_type, region) in self.no_capacity

    def withdraw(self, offering_id: str) -> None:
        """Stop listing a Capacity Block offering (someone else bought it, or AWS took it back)."""
        with self.lock:
            self.withdrawn.add(offering_id)

    def delay_next(self, action: str, seconds: float) -> None:
        self.delays[action] = seconds

    def throttle_next(self, action: str, times: int = 1) -> None:
        self.throttles[action] += times

    def set_state(self, reservation_id: str, state: str) -> None:
        with self.lock:
            self.reservations[reservation_id]["State"] = state

    def set_request_status(self, request_id: str, status: str) -> None:
        with self.lock:
            r = self.quota_requests[request_id]
            r["Status"] = status
            r["LastUpdated"] = datetime.now(UTC)
            if status == "APPROVED":
                self.quotas[(r["_region"], r["QuotaCode"])] = float(r["DesiredValue"])

    def reset(self) -> None:
        with self.lock:
            self.calls.clear()
            self.violations.clear()
            self.reservations.clear()
            self.tokens.clear()
            self.offerings.clear()
            self.withdrawn.clear()
            self.quotas.clear()
            self.quota_requests.clear()
            self.no_capacity.clear()
            self.delays.clear()
            self.throttles.clear()

    # ---- server -------------------------------------------------------------------------------------------
    def start(self) -> FakeAws:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status, headers, out = fake.handle(self.path, dict(self.headers), body)
                delay = headers.pop("X-Fake-Delay", None)
                if delay:
                    time.sleep(float(delay))
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *_: Any) -> None:
                pass

        self._server, self.url = loopback.serve(Handler)
        return self

    def stop(self) -> None:
        loopback.stop(self._server)

    # ---- dispatch -----------------------------------------------------------------------------------------
    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        target = headers.get("X-Amz-Target", "")
        region = _region(headers.get("Authorization", ""))
        if target:
            prefix, _, action = target.partition(".")
            service = {"ServiceQuotasV20190624": "service-quotas", "AWSPriceListService": "pricing"}.get(prefix)
            if service is None:
                return 400, {}, wire.json_error("UnknownOperationException", target)
            return self._json(service, action, region, body)
        form = dict(parse_qsl(body.decode(), keep_blank_values=True))
        action = form.get("Action", "")
        if action in EC2_ACTIONS or (action == "RunInstances" and self._refused(form.get("InstanceType"), region)):
            return self._ec2(action, region, form)
        return self._forward(path, headers, body)

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        if not self.moto_url:
            return 400, {}, wire.ec2_error("InvalidAction", "no moto server behind this fake", "fwd")
        u = urlsplit(self.moto_url)
        conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=30)
        keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection", "content-length")}
        conn.request("POST", path, body=body, headers=keep)
        resp = conn.getresponse()
        out = resp.read()
        ctype = resp.getheader("Content-Type", "text/xml")
        conn.close()
        return resp.status, {"Content-Type": ctype}, out

    def _ec2(self, action: str, region: str, form: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        op = wire.MODELS["ec2"].operation_model(action)
        rid = f"req-{next(self._ids):08d}"
        xml = {"Content-Type": "text/xml"}
        try:
            params = wire.parse_ec2_request(op, form)
        except wire.WireViolation as exc:
            self.violations.append(str(exc))
            return 400, xml, wire.ec2_error("InvalidParameterValue", str(exc), rid)
        with self.lock:
            self.calls[action] += 1
            if self.throttles[action] > 0:
                self.throttles[action] -= 1
                return 503, xml, wire.ec2_error("RequestLimitExceeded", "Request limit exceeded.", rid)
            try:
                data = getattr(self, "_" + _snake(action))(region, params)
            except _AwsError as err:
                return err.status, xml, wire.ec2_error(err.code, err.message, rid)
            try:
                out = wire.ec2_response(op, data, rid)
            except wire.WireViolation as exc:
                self.violations.append(str(exc))
                return 500, xml, wire.ec2_error("InternalError", str(exc), rid)
            delay = self.delays.pop(action, None)
        if delay:
            xml["X-Fake-Delay"] = str(delay)
        return 200, xml, out

    def _json(self, service: str, action: str, region: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        ctype = {"Content-Type": "application/x-amz-json-1.1"}
        try:
            op = wire.MODELS[service].operation_model(action)
            params = wire.parse_json_request(op, body)
        except Exception as exc:
            self.violations.append(f"{service} {action}: {exc}")
            return 400, ctype, wire.json_error("ValidationException", str(exc))
        handler = getattr(self, "_" + _snake(action), None)
        if handler is None:
            return 400, ctype, wire.json_error("UnknownOperationException", f"{action} is not faked")
        with self.lock:
            self.calls[action] += 1
            try:
                data = handler(region, params)
            except _AwsError as err:
                return err.status, ctype, wire.json_error(err.code, err.message)
            try:
                return 200, ctype, wire.json_response(op, data)
            except wire.WireViolation as exc:
                self.violations.append(str(exc))
                return 500, ctype, wire.json_error("ServiceException", str(exc))

    # ---- EC2: capacity reservations ------------------------------------------------------------------------
    def _run_instances(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        raise _AwsError(
            "InsufficientInstanceCapacity",
            f"We currently do not have sufficient {p['InstanceType']} capacity in the Availability Zone you requested.",
            500,
        )

    def _create_capacity_reservation(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        token = p.get("ClientToken")
        if token and token in self.tokens:
            return {"CapacityReservation": self.reservations[self.tokens[token]]}
        if self._refused(p["InstanceType"], region):
            raise _AwsError("InsufficientInstanceCapacity", f"no {p['InstanceType']} capacity to reserve", 500)
        cid = f"cr-{next(self._ids):017x}"
        now = datetime.now(UTC).replace(microsecond=0)
        cr: dict[str, Any] = {
            "CapacityReservationId": cid,
            "OwnerId": ACCOUNT,
            "CapacityReservationArn": f"arn:aws:ec2:{region}:{ACCOUNT}:capacity-reservation/{cid}",
            "InstanceType": p["InstanceType"],
            "InstancePlatform": p["InstancePlatform"],
            "AvailabilityZone": p.get("AvailabilityZone", f"{region}a"),
            "Tenancy": p.get("Tenancy", "default"),
            "TotalInstanceCount": p["InstanceCount"],
            "AvailableInstanceCount": p["InstanceCount"],
            "EbsOptimized": bool(p.get("EbsOptimized", False)),
            "EphemeralStorage": False,
            "State": "assessing" if "StartDate" in p else "pending",
            "StartDate": p.get("StartDate", now),
            "EndDateType": p.get("EndDateType", "unlimited"),
            "InstanceMatchCriteria": p.get("InstanceMatchCriteria", "open"),
            "CreateDate": now,
            "Tags": [t for spec in p.get("TagSpecifications", []) for t in spec.get("Tags", [])],
            "ReservationType": "default",
            "_region": region,
        }
        if "EndDate" in p:
            cr["EndDate"] = p["EndDate"]
        if "CommitmentDuration" in p:  # a future-dated reservation commits to its instances for the duration
            end = p["StartDate"] + timedelta(seconds=int(p["CommitmentDuration"]))
            cr["CommitmentInfo"] = {"CommittedInstanceCount": p["InstanceCount"], "CommitmentEndDate": end,
                                    "CommitmentDuration": int(p["CommitmentDuration"])}  # fmt: skip
        self.reservations[cid] = cr
        if token:
            self.tokens[token] = cid
        return {"CapacityReservation": _public(cr)}

    def _describe_capacity_reservations(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        ids = p.get("CapacityReservationIds")
        found = [cr for cr in self.reservations.values() if cr["_region"] == region]
        if ids:
            missing = [i for i in ids if i not in self.reservations]
            if missing:
                raise _AwsError("InvalidCapacityReservationId.NotFound", f"{missing[0]} does not exist", 400)
            found = [cr for cr in found if cr["CapacityReservationId"] in ids]
        for f in p.get("Filters", []):
            found = [cr for cr in found if _matches(cr, f["Name"], f.get("Values", []))]
        return {"CapacityReservations": [_public(cr) for cr in found]}

    def _modify_capacity_reservation(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        cr = self._cr(p["CapacityReservationId"])
        if cr["State"] not in ("active", "pending", "assessing", "scheduled"):
            raise _AwsError("IncorrectState", f"capacity reservation is {cr['State']}", 400)
        if "InstanceCount" in p:
            cr["TotalInstanceCount"] = cr["AvailableInstanceCount"] = p["InstanceCount"]
        if "EndDate" in p:
            cr["EndDate"] = p["EndDate"]
            cr["EndDateType"] = p.get("EndDateType", "limited")
        return {"Return": True}

    def _cancel_capacity_reservation(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        """As the API reference lists: assessing, delayed and active ones are cancelled; a scheduled one only with a
        cancellation quote and ``ApplyCancellationCharges`` (the fake issues no quotes: refused; AWS's exact error
        code for it is not documented, IncorrectState here); any other state is refused."""
        cr = self._cr(p["CapacityReservationId"])
        if cr["State"] == "scheduled" and not (p.get("QuoteId") and p.get("ApplyCancellationCharges")):
            msg = "a scheduled future-dated capacity reservation is cancelled only with a cancellation quote"
            raise _AwsError("IncorrectState", msg, 400)
        if cr["State"] not in ("assessing", "delayed", "active", "scheduled"):
            raise _AwsError("IncorrectState", f"capacity reservation is {cr['State']}", 400)
        cr["State"] = "cancelled"
        return {"Return": True}

    def _cr(self, cid: str) -> dict[str, Any]:
        if cid not in self.reservations:
            raise _AwsError("InvalidCapacityReservationId.NotFound", f"{cid} does not exist", 400)
        return self.reservations[cid]

    # ---- EC2: Capacity Blocks ------------------------------------------------------------------------------
    def _describe_capacity_block_offerings(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        itype = p.get("InstanceType", "p5.48xlarge")
        hours = int(p["CapacityDurationHours"])
        count = int(p.get("InstanceCount", 1))
        if hours % 24 or not 24 <= hours <= 182 * 24:
            raise _AwsError("InvalidParameterValue", "CapacityDurationHours must be whole days, 1 to 182", 400)
        first = p.get("StartDateRange", datetime.now(UTC))
        first = (first + timedelta(days=1)).replace(hour=11, minute=30, second=0, microsecond=0)
        last_end = p.get("EndDateRange", first + timedelta(days=56))
        rate = Decimal(ON_DEMAND_USD_H.get(itype, "50")) * Decimal("0.55")  # a block below on-demand
        out = []
        for day in range(0, 56, 7):
            start = first + timedelta(days=day)
            end = start + timedelta(hours=hours)
            if end > last_end:
                break
            # an offering keeps its id across searches (AWS lists the same offering under the same id)
            oid = (
                "cb-"
                + hashlib.sha256(f"{region}|{itype}|{count}|{hours}|{start.isoformat()}".encode()).hexdigest()[:17]
            )
            o = {
                "CapacityBlockOfferingId": oid,
                "InstanceType": itype,
                "AvailabilityZone": f"{region}{'ab'[day // 7 % 2]}",
                "InstanceCount": count,
                "StartDate": start,
                "EndDate": end,
                "CapacityBlockDurationHours": hours,
                "UpfrontFee": str((rate * count * hours).quantize(Decimal("0.01"))),
                "CurrencyCode": "USD",
                "Tenancy": "default",
            }
            self.offerings.setdefault(oid, {**o, "_region": region})
            if oid not in self.withdrawn:
                out.append(o)
        return {"CapacityBlockOfferings": out}

    def _purchase_capacity_block(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        o = self.offerings.get(p["CapacityBlockOfferingId"])
        if o is None or o["_region"] != region:
            raise _AwsError("InvalidCapacityBlockOfferingId.NotFound", "no such offering", 400)
        if o.get("_sold"):
            raise _AwsError("InsufficientInstanceCapacity", "this offering is no longer available", 500)
        o["_sold"] = True
        cid = f"cr-{next(self._ids):017x}"
        cr = {
            "CapacityReservationId": cid,
            "OwnerId": ACCOUNT,
            "InstanceType": o["InstanceType"],
            "InstancePlatform": p["InstancePlatform"],
            "AvailabilityZone": o["AvailabilityZone"],
            "Tenancy": "default",
            "TotalInstanceCount": o["InstanceCount"],
            "AvailableInstanceCount": o["InstanceCount"],
            "State": "payment-pending",
            "StartDate": o["StartDate"],
            "EndDate": o["EndDate"],
            "EndDateType": "limited",
            "InstanceMatchCriteria": "targeted",
            "CreateDate": datetime.now(UTC).replace(microsecond=0),
            "Tags": [t for spec in p.get("TagSpecifications", []) for t in spec.get("Tags", [])],
            "ReservationType": "capacity-block",
            "_region": region,
        }
        self.reservations[cid] = cr
        return {"CapacityReservation": _public(cr)}

    # ---- Service Quotas ------------------------------------------------------------------------------------
    def _quota(self, region: str, code: str) -> dict[str, Any]:
        if code not in QUOTA_NAMES:
            raise _AwsError("NoSuchResourceException", f"quota {code} not found", 400)
        value = self.quotas.setdefault((region, code), DEFAULT_QUOTAS_VCPUS[code])
        return {
            "ServiceCode": "ec2",
            "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
            "QuotaArn": f"arn:aws:servicequotas:{region}:{ACCOUNT}:ec2/{code}",
            "QuotaCode": code,
            "QuotaName": QUOTA_NAMES[code],
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }

    def _get_service_quota(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        if p["ServiceCode"] != "ec2":
            raise _AwsError("NoSuchResourceException", f"service {p['ServiceCode']} not faked", 400)
        return {"Quota": self._quota(region, p["QuotaCode"])}

    def _request_service_quota_increase(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        q = self._quota(region, p["QuotaCode"])
        if float(p["DesiredValue"]) <= q["Value"]:
            raise _AwsError("IllegalArgumentException", "DesiredValue must exceed the current value", 400)
        if any(
            r["_region"] == region and r["QuotaCode"] == p["QuotaCode"] and r["Status"] in ("PENDING", "CASE_OPENED")
            for r in self.quota_requests.values()
        ):
            raise _AwsError("ResourceAlreadyExistsException", "an increase request is already open", 400)
        now = datetime.now(UTC).replace(microsecond=0)
        rid = f"{next(self._ids):032x}"
        r = {
            "Id": rid,
            "ServiceCode": "ec2",
            "ServiceName": q["ServiceName"],
            "QuotaCode": p["QuotaCode"],
            "QuotaName": q["QuotaName"],
            "DesiredValue": float(p["DesiredValue"]),
            "Status": "PENDING",
            "Created": now,
            "LastUpdated": now,
            "Requester": f"arn:aws:iam::{ACCOUNT}:user/gpufleet",
            "QuotaArn": q["QuotaArn"],
            "GlobalQuota": False,
            "Unit": "None",
            "_region": region,
        }
        self.quota_requests[rid] = r
        return {"RequestedQuota": _public(r)}

    def _get_requested_service_quota_change(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        r = self.quota_requests.get(p["RequestId"])
        if r is None or r["_region"] != region:
            raise _AwsError("NoSuchResourceException", f"request {p['RequestId']} not found", 400)
        return {"RequestedQuota": _public(r)}

    def _list_requested_service_quota_change_history_by_quota(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        rs = [
            _public(r)
            for r in self.quota_requests.values()
            if r["_region"] == region
            and r["QuotaCode"] == p["QuotaCode"]
            and r["ServiceCode"] == p["ServiceCode"]
            and ("Status" not in p or r["Status"] == p["Status"])
        ]
        return {"RequestedQuotas": rs}

    # ---- Pricing -------------------------------------------------------------------------------------------
    def _get_products(self, region: str, p: dict[str, Any]) -> dict[str, Any]:
        f = {x["Field"]: x["Value"] for x in p.get("Filters", [])}
        itype = f.get("instanceType")
        if p["ServiceCode"] != "AmazonEC2" or itype not in ON_DEMAND_USD_H:
            return {"FormatVersion": "aws_v1", "PriceList": []}
        sku = f"FAKE{abs(hash((itype, f.get('regionCode')))) % 10**8:08d}"
        doc = {
            "product": {
                "productFamily": "Compute Instance",
                "sku": sku,
                "attributes": {
                    "instanceType": itype,
                    "regionCode": f.get("regionCode", ""),
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                },
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "pricePerUnit": {"USD": ON_DEMAND_USD_H[itype]},
                                "description": f"${ON_DEMAND_USD_H[itype]} per On Demand Linux {itype} Instance Hour",
                            }
                        },
                        "sku": sku,
                        "offerTermCode": "JRTCKXETXF",
                    }
                }
            },
        }
        return {"FormatVersion": "aws_v1", "PriceList": [json.dumps(doc)]}


class _AwsError(Exception):
    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(code)
        self.code = code
        self.message = message
        self.status = status


def _public(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


def _matches(cr: dict[str, Any], name: str, values: list[str]) -> bool:
    tags = {t["Key"]: t["Value"] for t in cr.get("Tags", [])}
    if name.startswith("tag:"):
        return tags.get(name[4:]) in values
    if name == "tag-key":
        return any(v in tags for v in values)
    field = {"state": "State", "instance-type": "InstanceType", "availability-zone": "AvailabilityZone"}.get(name)
    if field is None:
        raise _AwsError("InvalidParameterValue", f"filter {name!r} is not faked", 400)
    return str(cr.get(field)) in values


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _region(authorization: str) -> str:
    m = re.search(r"Credential=[^/]+/\d{8}/([^/]+)/", authorization)
    return m.group(1) if m else "us-east-1"
