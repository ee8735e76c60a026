"""AWS clients: one botocore configuration (standard retry mode, timeouts), the standard credential chain, and a
dry-run mode that records the calls it would make instead of sending them.

Contract: credentials come only from boto3's default chain (environment, shared config/credentials files, SSO,
container or instance role) or the named ``profile``; nothing here stores or logs them. In dry-run mode every
call is still serialized and validated against botocore's service model (so a malformed call fails the same
way it would for real), then answered with an empty response instead of being signed and sent.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

from gpufleet.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class AwsConfig:
    """Where and how to call AWS.

    ``regions``: the regions the fleet uses (quotas and prices are read per region). ``account_ids``: the
    accounts the credentials are expected to reach (informational; checked by nothing that would need a call).
    ``availability_zones``: the AZ per region where capacity reservations are placed (default ``<region>a``).
    ``endpoint_url``: an alternative endpoint for every service (a local emulator); None = AWS itself.
    ``max_attempts``: botocore standard-mode attempts per call (1 = no botocore retry).
    """

    regions: tuple[str, ...] = ("us-east-1",)
    account_ids: tuple[str, ...] = ()
    profile: str | None = None
    endpoint_url: str | None = None
    availability_zones: Mapping[str, str] = field(default_factory=dict)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    max_attempts: int = 3
    dry_run: bool = False
    instance_platform: str = "Linux/UNIX"
    pricing_region: str = "us-east-1"  # the Price List API answers only in a few regions

    def __post_init__(self) -> None:
        if not self.regions:
            raise ValidationError("aws_regions", "name at least one region")
        if not 1 <= self.max_attempts <= 10:
            raise ValidationError("aws_max_attempts", f"must be in 1..10, got {self.max_attempts}")

    def zone(self, region: str) -> str:
        return self.availability_zones.get(region, f"{region}a")


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call the dry run would have made (parameters as validated by the service model)."""

    service: str
    region: str
    operation: str
    params: dict[str, Any]

    def line(self) -> str:
        return f"{self.service}.{self.operation} region={self.region} {self.params}"


class AwsClients:
    """Thread-safe cache of boto3 clients per (service, region)."""

    def __init__(self, config: AwsConfig, *, on_dry_run: Callable[[CallRecord], None] | None = None) -> None:
        self.config = config
        self.dry_run_calls: list[CallRecord] = []
        self._on_dry_run = on_dry_run
        self._session = boto3.session.Session(profile_name=config.profile)
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()
        self._botocore = Config(
            retries={"mode": "standard", "total_max_attempts": config.max_attempts},
            connect_timeout=config.connect_timeout_s,
            read_timeout=config.read_timeout_s,
        )

    def client(self, service: str, region: str) -> Any:
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                c = self._session.client(
                    service, region_name=region, endpoint_url=self.config.endpoint_url, config=self._botocore
                )
                if self.config.dry_run:
                    c.meta.events.register("before-call", self._dry_run_handler(service, region))
                self._clients[key] = c
            return self._clients[key]

    def _dry_run_handler(self, service: str, region: str) -> Callable[..., Any]:
        def handler(model: Any, params: Any, **_: Any) -> tuple[Any, dict[str, Any]]:
            record = CallRecord(service, region, model.name, _original_params(params))
            self.dry_run_calls.append(record)
            if self._on_dry_run is not None:
                self._on_dry_run(record)
            return _DryHttp(), {"ResponseMetadata": {"HTTPStatusCode": 200, "DryRun": True}}

        return handler


def _original_params(request_dict: Any) -> dict[str, Any]:
    """The serialized body of the request (query-protocol form or JSON), enough to show what would be sent."""
    body = request_dict.get("body") if isinstance(request_dict, dict) else None
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k not in ("Action", "Version")}
    if isinstance(body, bytes | str) and body:
        import json

        try:
            loaded = json.loads(body)
            return loaded if isinstance(loaded, dict) else {"body": loaded}
        except ValueError:
            return {"body": body if isinstance(body, str) else body.decode(errors="replace")}
    return {}


class _DryHttp:
    status_code = 200
    headers: dict[str, str] = {}  # noqa: RUF012
    content = b""
